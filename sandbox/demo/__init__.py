# SPDX-License-Identifier: GPL-3.0-or-later
"""What `make demo` reads besides the bring-up's results (check.py)."""
