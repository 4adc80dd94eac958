# Runs the README's rulecheck command from the repository root and checks that
# README.md shows its output verbatim (exit status 1: rules fired).
execute_process(
  COMMAND ${RULECHECK} run examples/quickstart/train.rules --trace examples/quickstart/trace.jsonl
  WORKING_DIRECTORY ${ROOT}
  OUTPUT_VARIABLE out
  RESULT_VARIABLE status)
if(NOT status EQUAL 1)
  message(FATAL_ERROR "rulecheck exited ${status}, expected 1 (rules fired)")
endif()
file(READ ${ROOT}/README.md readme)
string(FIND "${readme}" "${out}" at)
if(at EQUAL -1 OR out STREQUAL "")
  message(FATAL_ERROR "README.md does not show rulecheck's output:\n${out}")
endif()
