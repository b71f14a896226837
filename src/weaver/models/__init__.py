"""weaver.models"""
