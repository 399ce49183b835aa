# scripts/gen_ops_header.cmake — writes lazytpu_ops.h, the op enum of the
# public header include/lazytpu.h, from the internal op table lazy/ops.def.
# Run by the build (CMakeLists.txt) whenever ops.def changes:
#   cmake -DCC=<c compiler> -DOPS_DEF=<lazy/ops.def> -DOUT=<header> -P gen_ops_header.cmake
# The table is read through the C preprocessor, the way every other user of
# ops.def reads it: only LT_OP's first column (the name) is used, so columns
# may be added to the table freely. The header is rewritten only when the op
# list changed (an edit elsewhere in ops.def rebuilds nothing).
foreach(v CC OPS_DEF OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "gen_ops_header.cmake: -D${v}= missing")
  endif()
endforeach()
get_filename_component(out_dir "${OUT}" DIRECTORY)
set(probe "${out_dir}/lazytpu_ops_probe.c")
file(WRITE "${probe}" "#define LT_OP(name, ...) @LT_OP@ name @LT_OP_END@\n#include \"${OPS_DEF}\"\n")
execute_process(COMMAND "${CC}" -E -P -x c "${probe}"
                OUTPUT_VARIABLE pp ERROR_VARIABLE err RESULT_VARIABLE rc)
file(REMOVE "${probe}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gen_ops_header.cmake: preprocessing ${OPS_DEF} failed:\n${err}")
endif()
string(REGEX MATCHALL "@LT_OP@ [A-Za-z0-9_]+ @LT_OP_END@" entries "${pp}")
list(LENGTH entries n)
if(n EQUAL 0)
  message(FATAL_ERROR "gen_ops_header.cmake: no LT_OP line in ${OPS_DEF}")
endif()
set(body "")
foreach(e ${entries})
  string(REGEX REPLACE "@LT_OP@ ([A-Za-z0-9_]+) @LT_OP_END@" "\\1" name "${e}")
  string(APPEND body "    LT_OP_${name},\n")
endforeach()
set(text "/* lazytpu_ops.h — GENERATED at build time from lazy/ops.def by
 * scripts/gen_ops_header.cmake: the op enum of include/lazytpu.h, in table
 * order (${n} ops). Do not edit; edit the op table. */
#ifndef LAZYTPU_OPS_H
#define LAZYTPU_OPS_H

typedef enum lt_op {
${body}    LT_NUM_OPS
} lt_op;

#endif
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
