int multipeer_baseline_placeholder(void);
