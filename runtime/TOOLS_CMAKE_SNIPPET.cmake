# Runtime tools, included by tools/CMakeLists.txt (sources live in tools/).
set(SAM_RUNTIME_TOOLS_DIR ${CMAKE_CURRENT_LIST_DIR}/../tools)

# Trace reading (JSONL; sam::tokenizer for string traces), shared by the tools.
add_library(sam_tool_traces STATIC ${SAM_RUNTIME_TOOLS_DIR}/trace_io.cc)
target_include_directories(sam_tool_traces PUBLIC ${SAM_RUNTIME_TOOLS_DIR})
target_link_libraries(sam_tool_traces PUBLIC sam::runtime sam::tokenizer
                      PRIVATE nlohmann_json::nlohmann_json)

# sam-replay: offline drafter evaluation; the corpora templates for `make-traces`.
add_executable(sam-replay ${SAM_RUNTIME_TOOLS_DIR}/sam_replay_main.cc)
target_link_libraries(sam-replay PRIVATE sam::runtime sam::corpora sam_tool_traces
                      CLI11::CLI11 nlohmann_json::nlohmann_json)

# bench_step: per-step propose + commit cost vs context length (prints figures).
add_executable(bench_step ${SAM_RUNTIME_TOOLS_DIR}/bench_step.cc)
target_link_libraries(bench_step PRIVATE sam::runtime sam_tool_traces CLI11::CLI11)
