"""repair"""
