"""Stand-ins for what the unit tests must not start: hyperfine (an executable, `hyperfine`) and a
backend (backend.FakeBackend)."""
