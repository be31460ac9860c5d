"""evalkit: did this model/server config keep its accuracy, and how fast is it?"""

__version__ = "0.1.0"
