#!/usr/bin/python3
"""Runs the ctypes example of sam.h as written, then a few more C API calls.

    ctypes_example.py SAM_H INDEX LIBDIR

SAM_H: the header whose "Usage (Python ctypes ...)" block is run; INDEX: an
index holding the example's ids (tests/capi/make_index.cc --sam-h-ids), put in
place of the example's b"general.sam"; LIBDIR: the folder that the example's
C.CDLL("libsam_runtime.so") must load the library from (the caller puts it on
LD_LIBRARY_PATH). Exit status 0 when everything holds, 1 otherwise.
"""
import contextlib
import ctypes as C
import io
import os
import sys


def example_code(header_path):
    """The ctypes example of the header's opening comment, without the ' *   ' margin."""
    lines = open(header_path, encoding="utf-8").read().split("\n")
    start = next(i for i, line in enumerate(lines) if "Usage (Python ctypes" in line)
    code = []
    for line in lines[start + 1:]:
        if line.startswith(" * Errors:"):
            break
        code.append(line[len(" *   "):] if line.startswith(" *   ") else "")
    return "\n".join(code).strip() + "\n"


def loaded_path(name):
    """Where this process mapped the library called `name` from."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(name):
                return path
    return None


def check(condition, what):
    if not condition:
        print("ctypes_example: FAILED: " + what)
        sys.exit(1)
    print("ctypes_example: ok: " + what)


def main():
    if len(sys.argv) != 4:
        print("usage: ctypes_example.py SAM_H INDEX LIBDIR", file=sys.stderr)
        return 2
    header, index, libdir = sys.argv[1:]
    code = example_code(header)
    check('C.CDLL("libsam_runtime.so")' in code, "the example loads libsam_runtime.so")
    check('b"general.sam"' in code, "the example opens general.sam")
    code = code.replace('b"general.sam"', repr(os.fsencode(index)))

    scope = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, header + " (ctypes example)", "exec"), scope)
    printed = out.getvalue()
    print(printed, end="")
    check(printed == "[263, 29871, 29872, 29873, 29874, 29875] [-1, 0, 1, 2, 3, 4]\n",
          "the example prints the draft after 1 450 4996 263")
    where = loaded_path("libsam_runtime.so")
    check(where is not None and os.path.samefile(os.path.dirname(where), libdir),
          "libsam_runtime.so loaded from " + libdir + " (" + str(where) + ")")

    lib = scope["lib"]
    lib.sam_status_name.restype = C.c_char_p
    lib.sam_policy_name.restype = C.c_char_p
    lib.sam_index_vocab_size.restype = C.c_uint32
    lib.sam_index_num_documents.restype = C.c_uint64
    check(lib.sam_status_name(3) == b"tokenizer_mismatch", "sam_status_name(3)")
    check(lib.sam_policy_name(3) == b"sam-tree", "sam_policy_name(3)")
    idx = C.c_void_p()
    check(lib.sam_index_open(b"/nonexistent/missing.sam", None, 0, C.byref(idx)) == 1,
          "a missing file is SAM_ERR_IO")
    check(b"missing.sam" in lib.sam_last_error(), "sam_last_error names the file")
    check(lib.sam_index_open(os.fsencode(index), None, 0, C.byref(idx)) == 0, "sam_index_open")
    check(lib.sam_index_vocab_size(idx) == 32000, "sam_index_vocab_size")
    check(lib.sam_index_num_documents(idx) == 3, "sam_index_num_documents")
    lib.sam_index_close(idx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
