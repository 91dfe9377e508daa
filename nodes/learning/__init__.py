"""The learner's rooms: the APPO step, its losses and its optimizer."""
