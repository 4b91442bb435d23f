"""Predicted timelines: a calibration of this machine and a discrete-event simulation of the
runner's schedule, written as a run directory (`dtgen calibrate`, `dtgen predict`).
Must not import torch (runner/calibrate.py measures; this package only reads the result).
"""
