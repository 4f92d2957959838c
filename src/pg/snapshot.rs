//! Letting go of the snapshot a statement holds while it sleeps.
//!
//! A function called from a `SELECT` runs under the statement's snapshot, and the backend
//! advertises that snapshot's xmin to the rest of the server for as long as the statement runs:
//! VACUUM of every table then keeps the rows that snapshot could still see. A claim that waits
//! for work holds it for its whole wait, though it never reads with it again (each attempt takes
//! a fresh snapshot, READ COMMITTED). So while it sleeps it stops advertising the xmin, when it
//! can show that nothing will read with the old snapshot afterwards ([`statement_is_lone_call`]),
//! and the next attempt's fresh snapshot advertises a new, later one.

use pgrx::pg_sys;

use super::version;

/// Whether the statement being run (`ActivePortal`) is nothing but a call of `function`, so
/// that nothing in it reads with its snapshot once the function has returned: one `SELECT`
/// whose only range-table entry is the function, under plan nodes that evaluate only immutable
/// expressions (a projection, `LIMIT`, `ORDER BY`), in an implicit transaction that has written
/// nothing, under READ COMMITTED. Anything else (a transaction block, where an open cursor or
/// a later statement may use an older snapshot; a join; a call from another function) is not.
pub fn statement_is_lone_call(function: pg_sys::Oid) -> bool {
    // SAFETY: reads backend globals and walks the active portal's plan tree read-only; every
    // pointer comes from PostgreSQL and is checked for NULL before use.
    unsafe {
        if pg_sys::IsTransactionBlock()
            || pg_sys::GetTopTransactionIdIfAny() != pg_sys::InvalidTransactionId
            || pg_sys::XactIsoLevel != pg_sys::XACT_READ_COMMITTED as i32
        {
            return false;
        }
        let portal = pg_sys::ActivePortal;
        if portal.is_null() || list_len((*portal).stmts) != 1 {
            return false;
        }
        let statement = list_nth((*portal).stmts, 0).cast::<pg_sys::PlannedStmt>();
        if statement.is_null()
            || (*statement).type_ != pg_sys::NodeTag::T_PlannedStmt
            || (*statement).commandType != pg_sys::CmdType::CMD_SELECT
            || (*statement).hasModifyingCTE
            || !(*statement).utilityStmt.is_null()
            || list_len((*statement).subplans) != 0
            || list_len((*statement).rowMarks) != 0
            || list_len((*statement).rtable) != 1
        {
            return false;
        }
        // The planned range table keeps the entry's kind; its functions are in the plan's
        // function scan, which plan_only_calls checks.
        let rte = list_nth((*statement).rtable, 0).cast::<pg_sys::RangeTblEntry>();
        if rte.is_null() || (*rte).rtekind != pg_sys::RTEKind::RTE_FUNCTION {
            return false;
        }
        plan_only_calls((*statement).planTree, function)
    }
}

/// Whether `plan` is a tree of the nodes [`statement_is_lone_call`] allows, with a function
/// scan of `function` at the bottom.
///
/// # Safety
/// `plan` is NULL or a valid plan node.
unsafe fn plan_only_calls(plan: *mut pg_sys::Plan, function: pg_sys::Oid) -> bool {
    if plan.is_null() || !(*plan).righttree.is_null() || !(*plan).initPlan.is_null() {
        return false;
    }
    let immutable =
        |node: *mut pg_sys::List| node.is_null() || !pg_sys::contain_mutable_functions(node.cast());
    if !immutable((*plan).targetlist) || !immutable((*plan).qual) {
        return false;
    }
    match (*plan).type_ {
        pg_sys::NodeTag::T_FunctionScan => {
            let scan = plan.cast::<pg_sys::FunctionScan>();
            if !(*plan).lefttree.is_null() || list_len((*scan).functions) != 1 {
                return false;
            }
            let entry = list_nth((*scan).functions, 0).cast::<pg_sys::RangeTblFunction>();
            let call = (*entry).funcexpr;
            // The arguments are evaluated before the call, so they may be anything.
            !call.is_null()
                && (*call).type_ == pg_sys::NodeTag::T_FuncExpr
                && (*call.cast::<pg_sys::FuncExpr>()).funcid == function
        }
        pg_sys::NodeTag::T_Limit => {
            let limit = plan.cast::<pg_sys::Limit>();
            let expression_ok = |node: *mut pg_sys::Node| {
                node.is_null() || !pg_sys::contain_mutable_functions(node)
            };
            expression_ok((*limit).limitOffset)
                && expression_ok((*limit).limitCount)
                && plan_only_calls((*plan).lefttree, function)
        }
        pg_sys::NodeTag::T_Sort | pg_sys::NodeTag::T_IncrementalSort => {
            plan_only_calls((*plan).lefttree, function)
        }
        pg_sys::NodeTag::T_Result => {
            let result = plan.cast::<pg_sys::Result>();
            let constant_qual = (*result).resconstantqual;
            (constant_qual.is_null() || !pg_sys::contain_mutable_functions(constant_qual))
                && ((*plan).lefttree.is_null() || plan_only_calls((*plan).lefttree, function))
        }
        _ => false,
    }
}

/// Stops advertising this backend's snapshot xmin, so VACUUM anywhere may remove rows that
/// only this backend's current snapshots could still see. The caller must have shown (with
/// [`statement_is_lone_call`]) that nothing reads with those snapshots again; the next snapshot
/// the backend takes advertises a fresh xmin.
pub fn stop_advertising_xmin() {
    // SAFETY: the catalog snapshot is dropped first (it would otherwise be reused with an xmin
    // the server no longer protects); clearing the advertised xmin is what PostgreSQL itself
    // does when a backend's last snapshot goes away.
    unsafe {
        pg_sys::InvalidateCatalogSnapshot();
        version::clear_advertised_xmin();
    }
}

/// The number of elements of a PostgreSQL list (0 for NIL).
///
/// # Safety
/// `list` is NIL or a valid list.
unsafe fn list_len(list: *mut pg_sys::List) -> i32 {
    if list.is_null() {
        0
    } else {
        (*list).length
    }
}

/// Element `n` of a pointer list.
///
/// # Safety
/// `list` is a valid pointer list with more than `n` elements.
unsafe fn list_nth(list: *mut pg_sys::List, n: i32) -> *mut pg_sys::Node {
    pg_sys::list_nth(list, n).cast()
}
