// CFuzzer only declares libFuzzer's driver (include/CFuzzer.h).
