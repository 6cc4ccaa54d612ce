# The install test (cmake -P): installs BUILD_DIR into WORK_DIR/prefix, checks the shared
# library's exported symbols, builds and runs tests/install/consumer against the prefix with
# find_package(sam), builds consumer.c again with pkg-config's flags, and runs the ctypes example
# of sam.h on the installed library.
#
# -D: BUILD_DIR SOURCE_DIR WORK_DIR INDEX (the C example's index) SAM_H_INDEX (--sam-h-ids)
#     GENERATOR C_COMPILER CXX_COMPILER NM PKG_CONFIG PYTHON (empty: skip the ctypes part)
#     TOOLS (ON: the tools must be installed too) DATADIR (CMAKE_INSTALL_DATADIR)
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR INDEX SAM_H_INDEX GENERATOR C_COMPILER CXX_COMPILER NM
            PKG_CONFIG DATADIR)
  if(NOT ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}= missing")
  endif()
endforeach()

# Runs a command; stops with its output when it fails; its stdout lands in OUTPUT_VAR.
function(run output_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "failed (${status}): ${command}\n${out}\n${err}")
  endif()
  set(${output_var} "${out}" PARENT_SCOPE)
endfunction()

function(expect text regex what)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${what}: expected /${regex}/ in:\n${text}")
  endif()
  message(STATUS "ok: ${what}")
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(out ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# What was installed, and where the library is.
file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
list(SORT installed)
string(REPLACE ";" "\n  " listing "${installed}")
message(STATUS "installed:\n  ${listing}")
file(GLOB_RECURSE library ${prefix}/*/libsam_runtime.so)
list(LENGTH library n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one libsam_runtime.so under ${prefix}, found: ${library}")
endif()
get_filename_component(libdir ${library} DIRECTORY)
set(expected include/sam/sam.h include/sam/runtime/session.h ${libdir}/pkgconfig/sam-runtime.pc
             ${libdir}/cmake/sam/samConfig.cmake)
if(TOOLS)
  list(APPEND expected bin/sam-build bin/sam-inspect bin/sam-replay bin/sam-traces
       ${DATADIR}/sam/cost-curves/cpu-llama-8x1024.csv ${DATADIR}/sam/cost-curves/flat-128.csv)
endif()
foreach(file ${expected})
  if(NOT IS_ABSOLUTE ${file})
    set(file ${prefix}/${file})
  endif()
  if(NOT EXISTS ${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
run(soname readelf -d ${library})
expect("${soname}" "Library soname: \\[libsam_runtime\\.so\\.1\\]" "soname libsam_runtime.so.1")

# Exported symbols: every C API function of sam.h, and nothing from zstd, xxhash or json.
run(symbols ${NM} -D --defined-only ${library})
file(STRINGS ${SOURCE_DIR}/runtime/include/sam/sam.h c_api REGEX "^SAM_API ")
foreach(line ${c_api})
  string(REGEX MATCH "(sam_[a-z0-9_]+)\\(" name "${line}")
  expect("${symbols}" " T ${CMAKE_MATCH_1}\n" "exported: ${CMAKE_MATCH_1}")
endforeach()
if(symbols MATCHES "ZSTD_|XXH|nlohmann|simdjson")
  message(FATAL_ERROR "a dependency's symbols are exported:\n${symbols}")
endif()

# An outside CMake project: find_package(sam) + sam::runtime, in C and in C++.
run(out ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/consumer
    -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
run(out ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(out ${WORK_DIR}/consumer/consumer_c ${INDEX})
expect("${out}" "consumer_c: draft from static: 13 14 15 16 17 18 19 20\n" "C consumer (CMake)")
expect("${out}" "consumer_c: missing index: io\n" "C consumer: error status")
expect("${out}" "consumer_c: header 0\\.2\\.0 \\(200, abi 1\\), library 0\\.2\\.0 \\(200, abi 1\\)\n"
       "C consumer: the installed header and library have the same version")
expect("${out}" "consumer_c: accepted 7, bonus 21\n" "C consumer: sam_session_verify_greedy")
expect("${out}" "consumer_c: stats {\"steps\":1,\n" "C consumer: sam_session_stats_json")
run(out ${WORK_DIR}/consumer/consumer_cxx ${INDEX})
expect("${out}" "consumer_cxx: draft from static: 13 14 15 16 17 18 19 20\n" "C++ consumer (CMake)")
expect("${out}" "consumer_cxx: missing index: io\n" "C++ consumer: sam::Error caught by type")

# The C program again, built with pkg-config's flags and the C compiler alone.
set(ENV{PKG_CONFIG_PATH} ${libdir}/pkgconfig)
run(flags ${PKG_CONFIG} --cflags --libs sam-runtime)
string(STRIP "${flags}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(out ${C_COMPILER} -std=c11 ${SOURCE_DIR}/tests/install/consumer/consumer.c ${flags}
    -o ${WORK_DIR}/consumer_c_pkgconfig)
set(ENV{LD_LIBRARY_PATH} ${libdir})
run(out ${WORK_DIR}/consumer_c_pkgconfig ${INDEX})
expect("${out}" "consumer_c: draft from static: 13 14 15 16 17 18 19 20\n" "C consumer (pkg-config)")

# The installed examples (share/sam/examples): the C one built with pkg-config's flags, the C++
# one through its own CMake project (find_package(sam)); both run on INDEX along a reference
# continuation and must print the MAT that the installed sam-replay gives for it.
set(examples ${prefix}/${DATADIR}/sam/examples)
foreach(file c/draft.c cpp/draft.cc cpp/CMakeLists.txt python/draft.py)
  if(NOT EXISTS ${examples}/${file})
    message(FATAL_ERROR "not installed: ${examples}/${file}")
  endif()
endforeach()
run(out ${C_COMPILER} -std=c11 ${examples}/c/draft.c ${flags} -o ${WORK_DIR}/draft_c)
run(out ${CMAKE_COMMAND} -S ${examples}/cpp -B ${WORK_DIR}/example_cpp -G "${GENERATOR}"
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
run(out ${CMAKE_COMMAND} --build ${WORK_DIR}/example_cpp)
file(WRITE ${WORK_DIR}/reference.txt "1 10 11 12\n13 14 15 16 17 18 19 20 40 41 13 14 15 16 30 31 32 33\n")
file(WRITE ${WORK_DIR}/reference.jsonl "{\"prompt_ids\":[1,10,11,12],\"output_ids\":[13,14,15,16,17,18,19,20,40,41,13,14,15,16,30,31,32,33]}\n")
run(c_mat ${WORK_DIR}/draft_c ${INDEX} ${WORK_DIR}/reference.txt)
run(cpp_mat ${WORK_DIR}/example_cpp/draft_cpp ${INDEX} ${WORK_DIR}/reference.txt)
if(NOT c_mat STREQUAL cpp_mat OR NOT c_mat MATCHES "^MAT [0-9.]+ \\(18 tokens in [0-9]+ steps\\)\n$")
  message(FATAL_ERROR "installed examples: C printed '${c_mat}', C++ '${cpp_mat}'")
endif()
if(TOOLS)
  run(replay ${prefix}/bin/sam-replay --index ${INDEX} --traces ${WORK_DIR}/reference.jsonl
      --policy sam-cal --json)
  string(JSON mat GET "${replay}" policies 0 mat)
  string(JSON steps GET "${replay}" policies 0 steps)
  execute_process(COMMAND printf "MAT %.3f (18 tokens in %d steps)\n" ${mat} ${steps}
                  OUTPUT_VARIABLE replay_mat)
  if(NOT c_mat STREQUAL replay_mat)
    message(FATAL_ERROR "installed examples: printed '${c_mat}', sam-replay gives '${replay_mat}'")
  endif()
endif()
message(STATUS "installed examples: ${c_mat}")

# sam.h's ctypes example, as written, on the installed library.
if(PYTHON)
  run(out ${PYTHON} ${SOURCE_DIR}/tests/install/ctypes_example.py ${prefix}/include/sam/sam.h
      ${SAM_H_INDEX} ${libdir})
  message(STATUS "ctypes example on the installed library:\n${out}")

  # The installed samdecoding package (when the build had it), imported from a
  # folder outside the build tree with only the prefix on PYTHONPATH: a
  # session drafts, and the engine adapters import.
  file(GLOB_RECURSE native ${prefix}/_native*.so)
  list(FILTER native INCLUDE REGEX "/samdecoding/_native[^/]*\\.so$")
  if(native)
    get_filename_component(package ${native} DIRECTORY)
    get_filename_component(site ${package} DIRECTORY)
    file(MAKE_DIRECTORY ${WORK_DIR}/py)
    execute_process(
      COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${site} ${PYTHON} -c
              "import samdecoding as sd, samdecoding.vllm, samdecoding.sglang, samdecoding.hf\n\
s = sd.Session(policy='sam', draft_size=8)\n\
s.attach(sd.Index.open('${INDEX}'))\n\
s.prefill([1, 10, 11, 12])\n\
d = s.propose(13)\n\
print('python:', sd.__file__.startswith('${site}'), d.source, d.tokens.tolist())"
      WORKING_DIRECTORY ${WORK_DIR}/py RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT status EQUAL 0)
      message(FATAL_ERROR "the installed samdecoding package failed (${status}):\n${out}${err}")
    endif()
    message(STATUS "installed Python package: ${out}")
    if(NOT out MATCHES "^python: True static \\[13, 14, 15, 16, 17, 18, 19, 20\\]")
      message(FATAL_ERROR "samdecoding was not imported from the prefix: ${out}")
    endif()
  endif()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
