//! Background work: the tasks every replica runs beside the API. Each is registered once, in
//! [`init`], with its name, what it does, how often it runs, what wakes it and the lease it
//! needs; the [`driver`] runs, supervises and reports them. The activations are in [`tasks`],
//! small adapters to the domain methods that do the work.

pub mod driver;
pub mod init;
pub mod maintenance;
pub mod tasks;
