//! Smoke run: N range-gets against a server started by hand.
fn main() {}
