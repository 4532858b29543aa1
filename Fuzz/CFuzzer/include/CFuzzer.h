#ifndef MULTIPEER_CFUZZER_H
#define MULTIPEER_CFUZZER_H
#include <stddef.h>
#include <stdint.h>
// libFuzzer's driver (libclang_rt.fuzzer_no_main), linked only into `make fuzz` builds.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
#endif
