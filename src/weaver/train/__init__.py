"""weaver.train"""
