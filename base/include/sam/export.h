/* SAM_API marks the declarations that the shared runtime library
 * (libsam_runtime.so) exports: the C API (sam/sam.h) and the documented C++
 * API (the classes and functions of the installed sam/runtime/ headers
 * and the index reader and errors they use). The libraries are compiled with
 * -fvisibility=hidden, so everything else stays inside the library. In the
 * static libraries the mark changes nothing. C and C++.
 *
 *   class SAM_API Session { ... };
 *   SAM_API int sam_index_open(...);
 */
#ifndef SAM_EXPORT_H_
#define SAM_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define SAM_API __attribute__((visibility("default")))
#else
#define SAM_API
#endif

#endif /* SAM_EXPORT_H_ */
