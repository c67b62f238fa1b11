//! A backend's records statements with a store's table names, rendered
//! once per store ([`Tables::render_static`](super::Tables::render_static):
//! borrowed as written under the default names).

/// Declares `Statements` (one field per statement, each the rendered text
/// of the `include_str!` given for it) in the module that calls it. There
/// is no set under the default names: a store renders its own.
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
    };
}
pub(crate) use statements;
