"""Template filters of the admin's queue pages."""
