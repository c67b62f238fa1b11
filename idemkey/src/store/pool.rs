//! What a store's connections are doing, for metrics.

/// Connection-pool figures for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Largest number of connections.
    pub max_size: usize,
    /// Connections open.
    pub size: usize,
    /// Idle connections.
    pub available: usize,
    /// Requests waiting for a connection.
    pub waiting: usize,
}
