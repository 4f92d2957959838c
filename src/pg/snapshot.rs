//! Letting go of the snapshot a statement holds while it sleeps.
//!
//! A function called from a `SELECT` runs under the statement's snapshot, and the backend
//! advertises that snapshot's xmin to the rest of the server for as long as the statement runs:
//! VACUUM of every table then keeps the rows that snapshot could still see. A claim that waits
//! for work holds it for its whole wait, though it never reads with it again (each attempt takes
//! a fresh snapshot, READ COMMITTED). So while it sleeps it stops advertising the xmin, when it
//! can show that nothing will read with an older snapshot afterwards
//! ([`nothing_reads_older_snapshots`]), and the next attempt's fresh snapshot advertises a new,
//! later one.
//!
//! What could read with an older snapshot, and how each is ruled out:
//! * the rest of the statement, once the function returns: the statement's only range-table
//!   entry is the function (so no plan node scans a relation), it has no subqueries, and every
//!   function its expressions call either reads no table with the statement's snapshot
//!   (immutable functions, volatile SQL and procedural-language functions, which take a snapshot
//!   of their own for each query under READ COMMITTED, and built-in functions other than the few
//!   that run a query with the caller's snapshot) or makes the claim keep its snapshot;
//! * the rest of the transaction: under READ COMMITTED each statement takes its own snapshot,
//!   so only open portals (cursors, named protocol portals) keep older ones; the claim keeps its
//!   snapshot while any other portal is open;
//! * the transaction's own writes: once it has an xid, its snapshots matter to the visibility of
//!   its own changes, so a transaction that wrote keeps its snapshot.
//!
//! REPEATABLE READ and SERIALIZABLE use one snapshot for the whole transaction, and a waiting
//! claim refuses to run under them.

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::subtransaction::in_subtransaction;
use super::version;

/// Built-in functions that run a query with the caller's snapshot (through SPI in read-only
/// mode): called after the claim, they would read with the statement's old snapshot.
const BUILT_INS_THAT_QUERY: &[&str] = &[
    "cursor_to_xml",
    "cursor_to_xmlschema",
    "database_to_xml",
    "database_to_xml_and_xmlschema",
    "database_to_xmlschema",
    "pg_get_ruledef",
    "pg_get_viewdef",
    "query_to_xml",
    "query_to_xml_and_xmlschema",
    "query_to_xmlschema",
    "schema_to_xml",
    "schema_to_xml_and_xmlschema",
    "schema_to_xmlschema",
    "table_to_xml",
    "table_to_xml_and_xmlschema",
    "table_to_xmlschema",
    "ts_stat",
];

/// The oids of the `internal` and `c` languages (pg_language.dat; fixed in every version).
const INTERNAL_LANGUAGE: u32 = 12;
const C_LANGUAGE: u32 = 13;

/// Whether, once `function` (the running claim) returns, nothing in this backend reads with a
/// snapshot taken before now (see the module's notes): then the claim may stop advertising its
/// xmin while it sleeps. Runs a catalog query for open portals, in a subtransaction rolled back
/// at once so that it holds no lock afterwards.
pub fn nothing_reads_older_snapshots(function: pg_sys::Oid) -> bool {
    // SAFETY: reads backend globals and walks the active portal's plan tree read-only; every
    // pointer comes from PostgreSQL and is checked for NULL before use.
    let portal_name = unsafe {
        if pg_sys::GetTopTransactionIdIfAny() != pg_sys::InvalidTransactionId
            || pg_sys::XactIsoLevel != pg_sys::XACT_READ_COMMITTED as i32
        {
            return false;
        }
        let portal = pg_sys::ActivePortal;
        if portal.is_null() || !statement_reads_nothing_after(portal, function) {
            return false;
        }
        if (*portal).name.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr((*portal).name)
                .to_string_lossy()
                .into_owned()
        }
    };
    !other_portals_open(&portal_name)
}

/// Whether the portal's statement, after `function` has returned, reads nothing with the
/// statement's snapshot.
///
/// # Safety
/// `portal` is a valid portal.
unsafe fn statement_reads_nothing_after(portal: pg_sys::Portal, function: pg_sys::Oid) -> bool {
    if list_len((*portal).stmts) != 1 {
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
    // The planned range table keeps the entry's kind; its functions are in the plan's function
    // scan, which plan_reads_nothing_after checks.
    let rte = list_nth((*statement).rtable, 0).cast::<pg_sys::RangeTblEntry>();
    if rte.is_null() || (*rte).rtekind != pg_sys::RTEKind::RTE_FUNCTION {
        return false;
    }
    plan_reads_nothing_after((*statement).planTree, function)
}

/// Whether `plan` is a tree of nodes that scan no relation, whose expressions read nothing with
/// the statement's snapshot, with a function scan of `function` at the bottom.
///
/// # Safety
/// `plan` is NULL or a valid plan node.
unsafe fn plan_reads_nothing_after(plan: *mut pg_sys::Plan, function: pg_sys::Oid) -> bool {
    if plan.is_null() || !(*plan).righttree.is_null() || !(*plan).initPlan.is_null() {
        return false;
    }
    if !expression_reads_nothing((*plan).targetlist.cast())
        || !expression_reads_nothing((*plan).qual.cast())
    {
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
            expression_reads_nothing((*limit).limitOffset)
                && expression_reads_nothing((*limit).limitCount)
                && plan_reads_nothing_after((*plan).lefttree, function)
        }
        pg_sys::NodeTag::T_WindowAgg => {
            let window = plan.cast::<pg_sys::WindowAgg>();
            expression_reads_nothing((*window).startOffset)
                && expression_reads_nothing((*window).endOffset)
                && plan_reads_nothing_after((*plan).lefttree, function)
        }
        pg_sys::NodeTag::T_Result => {
            let result = plan.cast::<pg_sys::Result>();
            expression_reads_nothing((*result).resconstantqual)
                && plan_reads_nothing_after((*plan).lefttree, function)
        }
        // Nodes that only reorder, group, count or project the rows below them.
        pg_sys::NodeTag::T_Sort
        | pg_sys::NodeTag::T_IncrementalSort
        | pg_sys::NodeTag::T_Agg
        | pg_sys::NodeTag::T_Group
        | pg_sys::NodeTag::T_Unique
        | pg_sys::NodeTag::T_ProjectSet
        | pg_sys::NodeTag::T_Material => plan_reads_nothing_after((*plan).lefttree, function),
        _ => false,
    }
}

/// Whether evaluating `node` reads nothing with the statement's snapshot: no subquery, and
/// every function it calls is one [`function_reads_nothing`] allows.
///
/// # Safety
/// `node` is NULL or a valid expression tree (or list of them).
unsafe fn expression_reads_nothing(node: *mut pg_sys::Node) -> bool {
    node.is_null() || !reads_with_statement_snapshot(node, std::ptr::null_mut())
}

/// The expression walker behind [`expression_reads_nothing`]: true stops the walk (found one).
#[pg_guard]
unsafe extern "C-unwind" fn reads_with_statement_snapshot(
    node: *mut pg_sys::Node,
    context: *mut std::ffi::c_void,
) -> bool {
    if node.is_null() {
        return false;
    }
    if matches!(
        (*node).type_,
        pg_sys::NodeTag::T_SubLink
            | pg_sys::NodeTag::T_SubPlan
            | pg_sys::NodeTag::T_AlternativeSubPlan
    ) {
        return true;
    }
    if pg_sys::check_functions_in_node(node, Some(function_may_read), std::ptr::null_mut()) {
        return true;
    }
    pg_sys::expression_tree_walker(node, Some(reads_with_statement_snapshot), context)
}

/// The function check behind [`expression_reads_nothing`]: true when the function may read
/// with the caller's snapshot.
#[pg_guard]
unsafe extern "C-unwind" fn function_may_read(
    function: pg_sys::Oid,
    _context: *mut std::ffi::c_void,
) -> bool {
    !function_reads_nothing(function)
}

/// Whether a call of `function` reads nothing with the caller's snapshot:
/// * an immutable function reads no table at all;
/// * a volatile function in SQL or a procedural language takes a snapshot of its own for each
///   query under READ COMMITTED;
/// * a built-in function (`pg_catalog`) reads catalogs through the catalog snapshot, except the
///   few listed in [`BUILT_INS_THAT_QUERY`];
/// * anything else (a user's STABLE function, a user's function in C, a user's aggregate) may
///   read with the statement's snapshot.
///
/// # Safety
/// In a transaction (reads the system caches).
unsafe fn function_reads_nothing(function: pg_sys::Oid) -> bool {
    let tuple = pg_sys::SearchSysCache1(
        pg_sys::SysCacheIdentifier::PROCOID as _,
        pg_sys::Datum::from(function),
    );
    if tuple.is_null() {
        return false;
    }
    let proc = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
    let volatility = (*proc).provolatile as u8;
    let language = (*proc).prolang;
    let aggregate = (*proc).prokind as u8 == pg_sys::PROKIND_AGGREGATE;
    let built_in = (*proc).pronamespace == pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE)
        && u32::from(function) < pg_sys::FirstNormalObjectId;
    let name = std::ffi::CStr::from_ptr((*proc).proname.data.as_ptr())
        .to_str()
        .unwrap_or_default()
        .to_owned();
    pg_sys::ReleaseSysCache(tuple);
    if built_in {
        return !BUILT_INS_THAT_QUERY.contains(&name.as_str());
    }
    // A user's aggregate calls transition functions of any kind, which its own volatility
    // does not describe.
    if aggregate {
        return false;
    }
    let in_c = language == pg_sys::Oid::from(C_LANGUAGE)
        || language == pg_sys::Oid::from(INTERNAL_LANGUAGE);
    match volatility {
        v if v == pg_sys::PROVOLATILE_IMMUTABLE => true,
        v if v == pg_sys::PROVOLATILE_VOLATILE => !in_c,
        _ => false,
    }
}

/// Whether a portal other than `own` (the running statement's) is open in this session: a
/// cursor or a named protocol portal, which may hold a snapshot older than the claim's.
fn other_portals_open(own: &str) -> bool {
    in_subtransaction(|| {
        // A read-only client: pgrx's writing calls (`Spi::get_one_with_args`) assign the
        // transaction an xid, which holds VACUUM back as surely as a snapshot.
        let others = Spi::connect(|client| {
            client
                .select(include_str!("other_portals.sql"), Some(1), &[own.into()])?
                .first()
                .get_one::<i64>()
        });
        // When the catalog cannot be read, assume the worst.
        (!matches!(others, Ok(Some(0))), false)
    })
}

/// Stops advertising this backend's snapshot xmin, so VACUUM anywhere may remove rows that
/// only this backend's current snapshots could still see. The caller must have shown (with
/// [`nothing_reads_older_snapshots`]) that nothing reads with those snapshots again; the next
/// snapshot the backend takes advertises a fresh xmin.
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
