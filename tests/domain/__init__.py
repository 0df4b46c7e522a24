"""The pure layer (loopctl/domain): rules on plain values, a fake clock, no processes."""
