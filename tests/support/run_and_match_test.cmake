# The test runner of tests/support/run_and_match.cmake can fail: each case runs
# it on a child whose outcome is known and checks the verdict.
#   cmake -DRUNNER=... -DLEAKY=... -DLEAK_CHECKED=ON|OFF -P run_and_match_test.cmake
cmake_minimum_required(VERSION 3.22)
set(failures "")

# expect(VERDICT WHY -D... -- COMMAND...): VERDICT pass or fail; WHY a
# substring the runner's message must contain when it fails.
function(expect verdict why)
  set(args ${ARGN})
  execute_process(COMMAND ${CMAKE_COMMAND} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  string(REPLACE ";" " " shown "${args}")
  if(verdict STREQUAL "pass" AND NOT rc EQUAL 0)
    set(failures "${failures}expected to pass: ${shown}\n${err}\n" PARENT_SCOPE)
  elseif(verdict STREQUAL "fail")
    if(rc EQUAL 0)
      set(failures "${failures}expected to fail: ${shown}\n" PARENT_SCOPE)
    elseif(NOT err MATCHES "${why}")
      set(failures "${failures}failed without saying '${why}': ${shown}\n${err}\n" PARENT_SCOPE)
    endif()
  endif()
endfunction()

set(summary "echo '3 passed, 0 failed'")
expect(pass "" "-DPASS=passed, 0 failed" -P ${RUNNER} -- sh -c "${summary}")
# A passing summary followed by a non-zero status (LeakSanitizer's 23).
expect(fail "exit status 23, expected 0" "-DPASS=passed, 0 failed" -P ${RUNNER} -- sh -c "${summary} && exit 23")
# The expected status and nothing else.
expect(pass "" -DEXIT_CODE=2 -P ${RUNNER} -- sh -c "exit 2")
expect(fail "exit status 0, expected 2" -DEXIT_CODE=2 -P ${RUNNER} -- sh -c "true")
# Anchored lines: `fired 1` does not match `fired 10`.
expect(fail "does not match" "-DPASS=(^|\n)fired 1\n" -P ${RUNNER} -- sh -c "echo 'fired 10'")
expect(pass "" "-DPASS=(^|\n)fired 1\n" -P ${RUNNER} -- sh -c "echo 'fired 1'")
expect(fail "matches" "-DFAIL=(^|\n)FAIL " -P ${RUNNER} -- sh -c "echo 'FAIL x'")
# A real leak: fails where LeakSanitizer runs, passes where it does not.
if(LEAK_CHECKED)
  # (LeakSanitizer exits 23 on its own, 1 inside ASan: either way not 0.)
  expect(fail "LeakSanitizer: detected memory leaks" "-DPASS=1 passed, 0 failed" -P ${RUNNER} -- ${LEAKY})
else()
  expect(pass "" "-DPASS=1 passed, 0 failed" -P ${RUNNER} -- ${LEAKY})
endif()

if(failures)
  message(FATAL_ERROR "${failures}")
endif()
