"""weaver.ops"""
