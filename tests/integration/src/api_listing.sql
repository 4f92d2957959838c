-- The public API of pg_jobs in the current database, one line per object, in the form of
-- sql/api-manifest.txt: every function of the extension (name, arguments with defaults,
-- result), every type of schema jobs with its attributes (composite types and the row types
-- of tables, which functions return and users read; enums with their labels), and every view
-- of schema jobs with its columns.
SELECT line FROM (
    SELECT pg_catalog.format('function %I.%I(%s) -> %s', n.nspname, p.proname,
                  pg_catalog.pg_get_function_arguments(p.oid),
                  pg_catalog.pg_get_function_result(p.oid)) AS line
      FROM pg_catalog.pg_proc p
      JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
      JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                                 AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_jobs'
    UNION ALL
    SELECT pg_catalog.format('%s %I.%I (%s)',
                  CASE WHEN c.relkind = 'v' THEN 'view' ELSE 'type' END, n.nspname, c.relname,
                  (SELECT pg_catalog.string_agg(pg_catalog.format('%I %s', a.attname,
                              pg_catalog.format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attnum)
                     FROM pg_catalog.pg_attribute a
                    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped))
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'jobs' AND c.relkind IN ('r', 'c', 'v')
    UNION ALL
    SELECT pg_catalog.format('type %I.%I enum (%s)', n.nspname, t.typname,
                  (SELECT pg_catalog.string_agg(pg_catalog.quote_literal(e.enumlabel), ', ' ORDER BY e.enumsortorder)
                     FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid))
      FROM pg_catalog.pg_type t
      JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     WHERE n.nspname = 'jobs' AND t.typtype = 'e'
) AS api
ORDER BY line
