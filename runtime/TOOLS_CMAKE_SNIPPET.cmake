# Runtime tools, included by tools/CMakeLists.txt (sources live in tools/).
set(SAM_RUNTIME_TOOLS_DIR ${CMAKE_CURRENT_LIST_DIR}/../tools)

# sam-replay: offline drafter evaluation; links sentencepiece for string traces
# and the corpora templates for `make-traces`.
add_executable(sam-replay ${SAM_RUNTIME_TOOLS_DIR}/sam_replay_main.cc)
target_link_libraries(sam-replay PRIVATE sam::runtime sam::corpora sam_sentencepiece
                      CLI11::CLI11 nlohmann_json::nlohmann_json)

# bench_step: per-step propose + commit cost vs context length (prints figures).
add_executable(bench_step ${SAM_RUNTIME_TOOLS_DIR}/bench_step.cc)
target_link_libraries(bench_step PRIVATE sam::runtime CLI11::CLI11)
