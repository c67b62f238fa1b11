//! The step journal's statements: the tokio-postgres backend's `.sql`
//! files, every parameter typed in the SQL.

pub(super) const LOAD: &str = include_str!("../postgres/sql/journal_load.sql");
pub(super) const LOAD_LOCKED: &str = include_str!("../postgres/sql/journal_load_locked.sql");
pub(super) const INSERT_FLOW: &str = include_str!("../postgres/sql/journal_insert_flow.sql");
pub(super) const STEPS: &str = include_str!("../postgres/sql/journal_steps.sql");
pub(super) const SETTLE: &str = include_str!("../postgres/sql/journal_settle.sql");
pub(super) const INSERT_STEP: &str = include_str!("../postgres/sql/journal_insert_step.sql");
pub(super) const COMPENSATED: &str = include_str!("../postgres/sql/journal_compensated.sql");
pub(super) const UPDATE_FLOW: &str = include_str!("../postgres/sql/journal_update_flow.sql");
pub(super) const ENQUEUE: &str = include_str!("../postgres/sql/enqueue.sql");
pub(super) const FINISH_RECORD: &str = include_str!("../postgres/sql/journal_finish_record.sql");
pub(super) const CLOSE_WINDOW: &str = include_str!("../postgres/sql/journal_close_window.sql");
pub(super) const FIND: &str = include_str!("../postgres/sql/journal_find.sql");
pub(super) const NEXT: &str = include_str!("../postgres/sql/journal_next.sql");
pub(super) const RESUME: &str = include_str!("../postgres/sql/journal_resume.sql");
