// ADPROF_SANITIZED_BUILD is defined when this translation unit is built with ASan or TSan.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ADPROF_SANITIZED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ADPROF_SANITIZED_BUILD 1
#endif
#endif
