//! The seccomp filter.
