"""weaver.serve"""
