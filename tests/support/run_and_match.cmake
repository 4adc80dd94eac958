# Runs a command and passes only if its exit status is the expected one and
# its output (stdout then stderr) matches PASS and does not match FAIL.
#
#   cmake [-DEXIT_CODE=N] [-DPASS=regex] [-DFAIL=regex] -P run_and_match.cmake -- COMMAND ARGS...
#
# ctest's own PASS_REGULAR_EXPRESSION replaces its exit-status check, so a
# crash, a sanitizer report (LeakSanitizer exits 23 after the program's own
# output) or a failing consumer could pass on a matching line. Tests that need
# a regular expression run through this script instead, which checks both.
cmake_minimum_required(VERSION 3.22)
set(command "")
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "run_and_match.cmake: no command after --")
endif()
if(NOT DEFINED EXIT_CODE)
  set(EXIT_CODE 0)
endif()

execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}${err}")
string(REPLACE ";" " " shown "${command}")
if(NOT "${rc}" STREQUAL "${EXIT_CODE}")
  message(FATAL_ERROR "${shown}: exit status ${rc}, expected ${EXIT_CODE}\n--- stdout\n${out}--- stderr\n${err}")
endif()
if(DEFINED PASS AND NOT output MATCHES "${PASS}")
  message(FATAL_ERROR "${shown}: output does not match '${PASS}'\n--- stdout\n${out}--- stderr\n${err}")
endif()
if(DEFINED FAIL AND output MATCHES "${FAIL}")
  message(FATAL_ERROR "${shown}: output matches '${FAIL}'\n--- stdout\n${out}--- stderr\n${err}")
endif()
