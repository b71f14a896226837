"""weaver.bench"""
