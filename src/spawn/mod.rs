//! The spawn path: prepare, clone, set up the child, supervise.
