"""weaver.spec"""
