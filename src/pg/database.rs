//! Which database this backend is connected to.

use std::ffi::CStr;

use pgrx::pg_sys;

/// The name of the database this backend is connected to.
pub fn current_database_name() -> String {
    // SAFETY: MyDatabaseId is set for a connected backend; get_database_name returns a palloc'd
    // copy (or NULL for a database dropped meanwhile), read before anything else runs.
    unsafe {
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        if name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}
