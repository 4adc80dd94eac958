# Runs `rulecheck run explain.rules --trace explain.jsonl --explain` and compares
# its standard output with explain.golden. VIGIL_UPDATE_GOLDEN=1 rewrites it.
execute_process(COMMAND ${RULECHECK} run explain.rules --trace explain.jsonl --explain
                WORKING_DIRECTORY ${DIR} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "rulecheck exited ${rc} (expected 1: rules fired)\n${err}")
endif()
if("$ENV{VIGIL_UPDATE_GOLDEN}" STREQUAL "1")
  file(WRITE ${DIR}/explain.golden "${out}")
  return()
endif()
file(READ ${DIR}/explain.golden expected)
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "--explain output differs from tests/faults/explain/explain.golden:\n"
                      "--- got:\n${out}--- expected:\n${expected}")
endif()
