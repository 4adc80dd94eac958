# One report, checked in a real browser: `rulecheck report` writes it, headless
# Chromium loads it with JavaScript on and dumps the DOM, and this script
# asserts from the dump that
#  - the page's self-check ran (#vigil-selftest holds its JSON),
#  - every chart rendered (a dygraph drew into a canvas of non-zero width),
#  - each chart shows exactly one annotation per firing it was given, and in
#    all EXPECT_ANNOTATIONS of them (FIRINGS: as many as `rulecheck run`
#    reports firings, i.e. each firing on exactly one chart),
#  - there are EXPECT_CHARTS charts,
#  - the same holds after each control (log scale, smoothing, all points) is
#    switched on, and after it is reset (the page does that for #selftest-controls),
#  - at WIDTH pixels nothing makes the whole page scroll sideways,
#  - downsampled lines kept every line's smallest and largest value and a
#    NaN/Inf sample if it had one, and at least DOWNSAMPLED lines were
#    downsampled (default 0),
#  - nothing reached the console: no error or warning seen by the page, and no
#    CONSOLE line in Chromium's log;
# then keeps a screenshot (SCREENSHOT) as the test's artifact.
#
# -DRULECHECK= -DCHROMIUM= -DWORKDIR= -DRULES= -DTRACES=a|b -DEXPECT_CHARTS=
# -DEXPECT_ANNOTATIONS=N|FIRINGS -DSCREENSHOT=path.png [-DEXTRA=--top|3]
# [-DWIDTH=pixels: the window width the DOM is checked at, default 1280]
# [-DDOWNSAMPLED=n: lines that must have been downsampled]
# No timeout but a generous deadlock guard: Chromium starts slowly under load.
cmake_minimum_required(VERSION 3.22)
set(guard 900)
if(NOT WIDTH)
  set(WIDTH 1280)
endif()

string(REPLACE "|" ";" traces "${TRACES}")
string(REPLACE "|" ";" extra "${EXTRA}")
# A directory of this run's own (concurrent runs of one test never share
# one), removed when the test passes and kept for a look when it fails.
string(RANDOM LENGTH 12 nonce)
set(WORKDIR "${WORKDIR}-${nonce}")
file(MAKE_DIRECTORY "${WORKDIR}")
set(profile "${WORKDIR}/chromium-profile")
set(report "${WORKDIR}/report.html")

execute_process(COMMAND "${RULECHECK}" report ${RULES} --trace ${traces} -o "${report}" ${extra}
                RESULT_VARIABLE status ERROR_VARIABLE err TIMEOUT ${guard})
if(NOT status MATCHES "^[01]$")
  message(FATAL_ERROR "rulecheck report exited ${status}:\n${err}")
endif()

if(EXPECT_ANNOTATIONS STREQUAL "FIRINGS")
  execute_process(COMMAND "${RULECHECK}" run ${RULES} --trace ${traces} --format json
                  OUTPUT_VARIABLE json RESULT_VARIABLE status ERROR_QUIET TIMEOUT ${guard})
  string(REGEX MATCHALL "\n" lines "${json}")
  list(LENGTH lines EXPECT_ANNOTATIONS)
  if(EXPECT_ANNOTATIONS EQUAL 0)
    message(FATAL_ERROR "the test needs firings: `rulecheck run` reported none")
  endif()
endif()

set(chromium_flags --headless --disable-gpu --no-sandbox --user-data-dir=${profile}
                   --no-first-run --disable-extensions --hide-scrollbars)
execute_process(COMMAND "${CHROMIUM}" ${chromium_flags} --enable-logging=stderr --v=0
                        --window-size=${WIDTH},900 --dump-dom "file://${report}#selftest-controls"
                OUTPUT_VARIABLE dom ERROR_VARIABLE log RESULT_VARIABLE status TIMEOUT ${guard})
if(NOT status EQUAL 0)
  message(FATAL_ERROR "chromium exited ${status}:\n${log}")
endif()
file(WRITE "${WORKDIR}/dom.html" "${dom}")
file(WRITE "${WORKDIR}/chromium.log" "${log}")

string(REGEX MATCH "<pre id=\"vigil-selftest\"[^>]*>([^<]*)</pre>" _ "${dom}")
set(result "${CMAKE_MATCH_1}")
if(result STREQUAL "")
  message(FATAL_ERROR "the page's self-check did not run (a script failed before it); "
                      "see ${WORKDIR}/dom.html and chromium.log")
endif()
string(REPLACE "&quot;" "\"" result "${result}")
string(REPLACE "&lt;" "<" result "${result}")
string(REPLACE "&gt;" ">" result "${result}")
string(REPLACE "&amp;" "&" result "${result}")
message(STATUS "self-check: ${result}")

set(failures "")
string(JSON charts GET "${result}" charts)
string(JSON rendered GET "${result}" rendered)
string(JSON annotations GET "${result}" annotations)
string(JSON errors LENGTH "${result}" errors)
string(JSON mismatched LENGTH "${result}" mismatched)
string(JSON overflow GET "${result}" overflow)
string(JSON downsampled ERROR_VARIABLE none GET "${result}" downsampled)
if(NOT DOWNSAMPLED)
  set(DOWNSAMPLED 0)
endif()
if(downsampled LESS DOWNSAMPLED)
  string(APPEND failures "expected at least ${DOWNSAMPLED} downsampled lines, got ${downsampled}\n")
endif()
if(NOT overflow EQUAL 0)
  string(APPEND failures "at ${WIDTH} pixels the page is ${overflow} pixels wider than the window\n")
endif()
string(JSON controls ERROR_VARIABLE no_controls LENGTH "${result}" controls)
if(NOT controls EQUAL 3)
  string(APPEND failures "the controls were not exercised (${no_controls})\n")
endif()
if(NOT charts EQUAL EXPECT_CHARTS)
  string(APPEND failures "expected ${EXPECT_CHARTS} charts, the page has ${charts}\n")
endif()
if(NOT rendered EQUAL charts)
  string(APPEND failures "only ${rendered} of ${charts} charts rendered\n")
endif()
if(NOT mismatched EQUAL 0)
  string(JSON which GET "${result}" mismatched)
  string(APPEND failures "charts whose annotations differ from their firings: ${which}\n")
endif()
if(NOT annotations EQUAL EXPECT_ANNOTATIONS)
  string(APPEND failures "expected ${EXPECT_ANNOTATIONS} annotations, the DOM has ${annotations}\n")
endif()
if(NOT errors EQUAL 0)
  string(JSON which GET "${result}" errors)
  string(APPEND failures "console errors: ${which}\n")
endif()
# Count the annotation elements in the dump too, not only the page's own count.
string(REGEX MATCHALL "class=\"dygraph-annotation" found "${dom}")
list(LENGTH found found)
if(NOT found EQUAL EXPECT_ANNOTATIONS)
  string(APPEND failures "the dumped DOM has ${found} annotation elements, expected ${EXPECT_ANNOTATIONS}\n")
endif()
string(REGEX MATCHALL "CONSOLE[^\n]*" console "${log}")
if(console)
  string(APPEND failures "console output: ${console}\n")
endif()
if(failures)
  message(FATAL_ERROR "${failures}see ${WORKDIR}/dom.html and chromium.log")
endif()

execute_process(COMMAND "${CHROMIUM}" ${chromium_flags} --window-size=${WIDTH},1500
                        "--screenshot=${SCREENSHOT}" "file://${report}"
                RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE log TIMEOUT ${guard})
if(NOT status EQUAL 0 OR NOT EXISTS "${SCREENSHOT}")
  message(FATAL_ERROR "chromium could not take the screenshot (${status}):\n${log}")
endif()
message(STATUS "screenshot: ${SCREENSHOT}")
file(REMOVE_RECURSE "${WORKDIR}")
