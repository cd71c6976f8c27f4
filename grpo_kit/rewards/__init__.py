"""rewards"""
