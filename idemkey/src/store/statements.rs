//! A backend's records statements with a store's table names, rendered
//! once per store ([`Tables::render_static`](super::Tables::render_static):
//! borrowed as written under the default names).

/// Declares `Statements` (one field per statement, each the rendered text
/// of the `include_str!` given for it) and `DEFAULT`, the statements under
/// the default table names, in the module that calls it.
macro_rules! statements {
    ($($field:ident = $sql:expr),+ $(,)?) => {
        /// The records statements, with a store's table names.
        #[derive(Debug)]
        pub(crate) struct Statements {
            $(pub(super) $field: std::borrow::Cow<'static, str>,)+
        }

        impl Statements {
            pub(crate) fn new(tables: &$crate::store::Tables) -> Self {
                Self {
                    $($field: tables.render_static($sql),)+
                }
            }
        }

        /// The statements under the default table names.
        pub(super) static DEFAULT: std::sync::LazyLock<std::sync::Arc<Statements>> =
            std::sync::LazyLock::new(|| {
                std::sync::Arc::new(Statements::new(&$crate::store::Tables::default()))
            });
    };
}
pub(crate) use statements;
