//! Background work: the tasks every replica runs beside the API, each registered once with
//! its name, what it does, how often it runs and the lease it needs.

pub mod maintenance;
