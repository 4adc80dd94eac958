# ctest driver for one golden file: cmake -DRULECHECK=... -DDIR=... -DNAME=... -P compare_golden.cmake
# Runs `rulecheck check NAME.rules` with DIR as working directory (so positions
# print as bare file names) and compares stderr with NAME.expected.
execute_process(
  COMMAND ${RULECHECK} check ${NAME}.rules
  WORKING_DIRECTORY ${DIR}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE stdout
  ERROR_VARIABLE stderr)

set(expected_file ${DIR}/${NAME}.expected)
if("$ENV{VIGIL_UPDATE_GOLDEN}" STREQUAL "1")
  file(WRITE ${expected_file} "${stderr}")
  message(STATUS "updated ${expected_file}")
  return()
endif()

if(NOT EXISTS ${expected_file})
  message(FATAL_ERROR "missing ${expected_file} (run with VIGIL_UPDATE_GOLDEN=1 to create it)")
endif()
file(READ ${expected_file} expected)

# A golden that expects an error must make `check` fail with status 2.
string(FIND "${expected}" ": error: " has_error)
if(has_error EQUAL -1)
  set(expected_status 0)
else()
  set(expected_status 2)
endif()

set(failed FALSE)
if(NOT "${stderr}" STREQUAL "${expected}")
  set(failed TRUE)
  # Show a real diff: write the actual output next to the build and diff it.
  string(MD5 tag "${DIR}/${NAME}")
  set(actual_file ${CMAKE_CURRENT_BINARY_DIR}/golden_actual_${NAME}_${tag}.txt)
  file(WRITE ${actual_file} "${stderr}")
  execute_process(COMMAND diff -u ${expected_file} ${actual_file} OUTPUT_VARIABLE diff)
  message("stderr differs from ${NAME}.expected:\n${diff}")
endif()
if(NOT "${status}" STREQUAL "${expected_status}")
  set(failed TRUE)
  message("exit status ${status}, expected ${expected_status}")
endif()
if(NOT "${stdout}" STREQUAL "")
  set(failed TRUE)
  message("unexpected output on stdout:\n${stdout}")
endif()
if(failed)
  message(FATAL_ERROR "golden ${NAME} failed (VIGIL_UPDATE_GOLDEN=1 regenerates)")
endif()
