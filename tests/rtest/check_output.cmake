# Runs `rulecheck test` on one .rtest file and checks its exit status and its
# output (stdout, then stderr) against a golden file, exactly.
#   cmake -DRULECHECK=... -DTEST_FILE=... -DEXPECTED=... -DEXIT_CODE=N -P check_output.cmake
# Run from tests/rtest/ so the paths in the output are stable.
execute_process(
  COMMAND ${RULECHECK} test ${TEST_FILE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
set(got "${out}--- stderr\n${err}")
if(UPDATE_GOLDEN)
  file(WRITE ${EXPECTED} "${got}")
  return()
endif()
if(NOT rc STREQUAL "${EXIT_CODE}")
  message(FATAL_ERROR "rulecheck test ${TEST_FILE}: exit status ${rc}, expected ${EXIT_CODE}\n${got}")
endif()
file(READ ${EXPECTED} want)
if(NOT got STREQUAL want)
  message(FATAL_ERROR "rulecheck test ${TEST_FILE}: output differs from ${EXPECTED}\n"
                      "--- got:\n${got}\n--- expected:\n${want}")
endif()
