"""The live-session core shared by every streaming surface."""
