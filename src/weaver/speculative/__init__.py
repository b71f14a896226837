"""weaver.speculative"""
