"""weaver.ops.triton"""
