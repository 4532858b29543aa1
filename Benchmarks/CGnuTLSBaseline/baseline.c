int multipeer_baseline_placeholder(void) { return 0; }
