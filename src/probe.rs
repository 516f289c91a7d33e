//! Probes of what this kernel and environment support.
