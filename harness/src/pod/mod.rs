//! Kandev's knowledge of a task Pod, mirrored: the template rules, the session identity and
//! labels, composition of the Pod, and the comparison of an admitted Pod with the requested
//! one. Pure functions over typed objects; nothing here talks to an engine or a cluster.

pub mod admission;
pub mod compose;
pub mod identity;
pub mod quantity;
pub mod release;
pub mod requests;
pub mod template;
