-- Everything the catalogs say about pg_jobs in the current database, one row per
-- (object, property, value), for tests that compare two databases as sets: an upgraded one and
-- a fresh install must give the same rows. Objects are the extension's members and everything
-- in schema jobs; what differs between two databases by nature (OIDs, sequence positions, row
-- counts, statistics) is left out, and values are normalised where PostgreSQL has two spellings
-- of the same thing (a NULL ACL and the owner's default ACL, ACL entries in any order).
WITH ext AS (
    SELECT oid, extversion, extconfig, extcondition, extnamespace, extrelocatable
      FROM pg_catalog.pg_extension WHERE extname = 'pg_jobs'
),
members AS (
    SELECT d.classid, d.objid, d.objsubid
      FROM pg_catalog.pg_depend d, ext
     WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
       AND d.refobjid = ext.oid AND d.deptype = 'e'
),
jobs_ns AS (
    SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'jobs'
),
procs AS (
    SELECT p.*
      FROM pg_catalog.pg_proc p
     WHERE p.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_proc'::regclass)
        OR p.pronamespace IN (SELECT oid FROM jobs_ns)
),
rels AS (
    SELECT c.*
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace IN (SELECT oid FROM jobs_ns)
        OR c.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_class'::regclass)
),
types AS (
    SELECT t.*
      FROM pg_catalog.pg_type t
     WHERE t.typnamespace IN (SELECT oid FROM jobs_ns)
        OR t.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_type'::regclass)
)
SELECT * FROM (
    -- The extension itself.
    SELECT 'extension pg_jobs' AS object, 'version' AS property, ext.extversion AS value FROM ext
    UNION ALL
    SELECT 'extension pg_jobs', 'schema', ext.extnamespace::regnamespace::text FROM ext
    UNION ALL
    SELECT 'extension pg_jobs', 'relocatable', ext.extrelocatable::text FROM ext
    UNION ALL
    -- Which tables pg_dump dumps the rows of, and with what condition.
    SELECT 'extension pg_jobs', 'config dump ' || cfg.tab::regclass::text, coalesce(cfg.cond, '')
      FROM ext, LATERAL unnest(ext.extconfig, ext.extcondition) AS cfg(tab, cond)
    UNION ALL
    -- Membership.
    SELECT 'extension pg_jobs', 'member',
           pg_catalog.pg_describe_object(m.classid, m.objid, m.objsubid)
      FROM members m
    UNION ALL
    -- Schema jobs.
    SELECT 'schema ' || n.nspname, 'owner', pg_catalog.pg_get_userbyid(n.nspowner)
      FROM pg_catalog.pg_namespace n WHERE n.oid IN (SELECT oid FROM jobs_ns)
    UNION ALL
    SELECT 'schema ' || n.nspname, 'acl',
           (SELECT coalesce(string_agg(a::text, ',' ORDER BY a::text), '')
              FROM unnest(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a)
      FROM pg_catalog.pg_namespace n WHERE n.oid IN (SELECT oid FROM jobs_ns)
    UNION ALL
    -- Functions: signature, result, how they run, who may call them, what they run.
    SELECT 'function ' || p.oid::regprocedure::text, prop, val
      FROM procs p,
           LATERAL (VALUES
               ('arguments', pg_catalog.pg_get_function_arguments(p.oid)),
               ('result', pg_catalog.pg_get_function_result(p.oid)),
               ('kind', p.prokind::text),
               ('language', (SELECT lanname FROM pg_catalog.pg_language WHERE oid = p.prolang)),
               ('security definer', p.prosecdef::text),
               ('leakproof', p.proleakproof::text),
               ('strict', p.proisstrict::text),
               ('returns set', p.proretset::text),
               ('volatility', p.provolatile::text),
               ('parallel', p.proparallel::text),
               ('cost', p.procost::text),
               ('rows', p.prorows::text),
               ('config', coalesce(array_to_string(p.proconfig, ', '), '')),
               ('source', CASE WHEN p.prolang = (SELECT oid FROM pg_catalog.pg_language WHERE lanname = 'c')
                               THEN p.prosrc ELSE md5(p.prosrc) END),
               ('library', coalesce(p.probin, '')),
               ('owner', pg_catalog.pg_get_userbyid(p.proowner)),
               ('acl', (SELECT coalesce(string_agg(a::text, ',' ORDER BY a::text), '')
                          FROM unnest(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) a))
           ) AS v(prop, val)
    UNION ALL
    -- Relations: tables, views, sequences, indexes, composite types' relations.
    SELECT 'relation ' || c.oid::regclass::text, prop, val
      FROM rels c,
           LATERAL (VALUES
               ('kind', c.relkind::text),
               ('persistence', c.relpersistence::text),
               ('options', coalesce(array_to_string(c.reloptions, ', '), '')),
               ('row security', c.relrowsecurity::text),
               ('forced row security', c.relforcerowsecurity::text),
               ('replica identity', c.relreplident::text),
               ('access method', coalesce((SELECT amname FROM pg_catalog.pg_am WHERE oid = c.relam), '')),
               ('owner', pg_catalog.pg_get_userbyid(c.relowner)),
               ('acl', (SELECT coalesce(string_agg(a::text, ',' ORDER BY a::text), '')
                          FROM unnest(coalesce(c.relacl,
                                   pg_catalog.acldefault((CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END)::"char",
                                                         c.relowner))) a)),
               ('view definition', CASE WHEN c.relkind IN ('v', 'm')
                                        THEN pg_catalog.pg_get_viewdef(c.oid) ELSE '' END)
           ) AS v(prop, val)
    UNION ALL
    -- Columns, by position among the live ones (a dropped column leaves a gap in attnum).
    SELECT 'relation ' || c.oid::regclass::text,
           'column ' || lpad(row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)::text, 3, '0'),
           pg_catalog.format('%I %s%s%s%s%s%s', a.attname,
                  pg_catalog.format_type(a.atttypid, a.atttypmod),
                  CASE WHEN a.attcollation <> 0 AND a.attcollation <> (SELECT typcollation FROM pg_catalog.pg_type WHERE oid = a.atttypid)
                       THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END,
                  CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                  coalesce(' DEFAULT ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''),
                  CASE WHEN a.attidentity <> '' THEN ' IDENTITY ' || a.attidentity::text ELSE '' END
                  || CASE WHEN a.attgenerated <> '' THEN ' GENERATED ' || a.attgenerated::text ELSE '' END,
                  CASE WHEN a.attstorage <> (SELECT typstorage FROM pg_catalog.pg_type WHERE oid = a.atttypid)
                       THEN ' STORAGE ' || a.attstorage::text ELSE '' END
                  || CASE WHEN a.attstattarget <> -1 THEN ' STATISTICS ' || a.attstattarget ELSE '' END
                  || CASE WHEN a.attacl IS NOT NULL THEN ' ACL ' || a.attacl::text ELSE '' END)
      FROM rels c
      JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    UNION ALL
    -- Indexes, with what pg_get_indexdef leaves out.
    SELECT 'relation ' || i.indrelid::regclass::text,
           'index ' || i.indexrelid::regclass::text,
           pg_catalog.pg_get_indexdef(i.indexrelid)
           || CASE WHEN i.indisclustered THEN ' CLUSTERED' ELSE '' END
           || CASE WHEN i.indisreplident THEN ' REPLICA IDENTITY' ELSE '' END
           || CASE WHEN NOT i.indisvalid THEN ' INVALID' ELSE '' END
      FROM pg_catalog.pg_index i WHERE i.indrelid IN (SELECT oid FROM rels)
    UNION ALL
    -- Constraints of tables and of domains.
    SELECT CASE WHEN con.conrelid <> 0 THEN 'relation ' || con.conrelid::regclass::text
                ELSE 'type ' || con.contypid::regtype::text END,
           'constraint ' || con.conname,
           pg_catalog.pg_get_constraintdef(con.oid)
           || CASE WHEN con.condeferrable THEN ' DEFERRABLE' ELSE '' END
           || CASE WHEN con.condeferred THEN ' INITIALLY DEFERRED' ELSE '' END
           || CASE WHEN NOT con.convalidated THEN ' NOT VALID' ELSE '' END
      FROM pg_catalog.pg_constraint con
     WHERE con.conrelid IN (SELECT oid FROM rels) OR con.contypid IN (SELECT oid FROM types)
    UNION ALL
    -- Row-level security policies.
    SELECT 'relation ' || pol.polrelid::regclass::text,
           'policy ' || pol.polname,
           pg_catalog.format('FOR %s %s TO %s USING (%s) WITH CHECK (%s)',
                  pol.polcmd::text, CASE WHEN pol.polpermissive THEN 'PERMISSIVE' ELSE 'RESTRICTIVE' END,
                  (SELECT string_agg(rn, ',' ORDER BY rn)
                     FROM unnest(pol.polroles) r,
                          LATERAL (SELECT CASE WHEN r = 0 THEN 'public' ELSE pg_catalog.pg_get_userbyid(r) END) AS x(rn)),
                  coalesce(pg_catalog.pg_get_expr(pol.polqual, pol.polrelid), ''),
                  coalesce(pg_catalog.pg_get_expr(pol.polwithcheck, pol.polrelid), ''))
      FROM pg_catalog.pg_policy pol WHERE pol.polrelid IN (SELECT oid FROM rels)
    UNION ALL
    -- Triggers and rules.
    SELECT 'relation ' || t.tgrelid::regclass::text, 'trigger ' || t.tgname,
           pg_catalog.pg_get_triggerdef(t.oid) || ' ENABLED ' || t.tgenabled::text
      FROM pg_catalog.pg_trigger t WHERE t.tgrelid IN (SELECT oid FROM rels) AND NOT t.tgisinternal
    UNION ALL
    SELECT 'relation ' || r.ev_class::regclass::text, 'rule ' || r.rulename, pg_catalog.pg_get_ruledef(r.oid)
      FROM pg_catalog.pg_rewrite r WHERE r.ev_class IN (SELECT oid FROM rels) AND r.rulename <> '_RETURN'
    UNION ALL
    -- Sequences: their parameters (not their positions) and the column owning them.
    SELECT 'relation ' || s.seqrelid::regclass::text, 'sequence',
           pg_catalog.format('%s start %s increment %s min %s max %s cache %s cycle %s',
                  s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle)
      FROM pg_catalog.pg_sequence s WHERE s.seqrelid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || d.objid::regclass::text, 'owned by',
           d.refobjid::regclass::text || '.' || (SELECT quote_ident(attname) FROM pg_catalog.pg_attribute
                                                   WHERE attrelid = d.refobjid AND attnum = d.refobjsubid)
           || ' (' || d.deptype::text || ')'
      FROM pg_catalog.pg_depend d
     WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
       AND d.objid IN (SELECT oid FROM rels WHERE relkind = 'S') AND d.deptype IN ('a', 'i')
    UNION ALL
    -- Types: enums with their labels in order, domains, composite types, ranges; owner and ACL.
    SELECT 'type ' || t.oid::regtype::text, prop, val
      FROM types t,
           LATERAL (VALUES
               ('kind', t.typtype::text),
               ('owner', pg_catalog.pg_get_userbyid(t.typowner)),
               ('acl', (SELECT coalesce(string_agg(a::text, ',' ORDER BY a::text), '')
                          FROM unnest(coalesce(t.typacl, pg_catalog.acldefault('T', t.typowner))) a)),
               ('labels', (SELECT coalesce(string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder), '')
                             FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid)),
               ('base type', CASE WHEN t.typtype = 'd'
                                  THEN pg_catalog.format_type(t.typbasetype, t.typtypmod)
                                       || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
                                       || coalesce(' DEFAULT ' || t.typdefault, '')
                                  ELSE '' END),
               ('relation', CASE WHEN t.typrelid <> 0 THEN t.typrelid::regclass::text ELSE '' END)
           ) AS v(prop, val)
     WHERE t.typtype <> 'b' OR t.typelem = 0  -- array types follow their element type
    UNION ALL
    -- Comments on every object above, columns included.
    SELECT 'comment', pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
      FROM pg_catalog.pg_description d
     WHERE (d.classoid = 'pg_catalog.pg_proc'::regclass AND d.objoid IN (SELECT oid FROM procs))
        OR (d.classoid = 'pg_catalog.pg_class'::regclass AND d.objoid IN (SELECT oid FROM rels))
        OR (d.classoid = 'pg_catalog.pg_type'::regclass AND d.objoid IN (SELECT oid FROM types))
        OR (d.classoid = 'pg_catalog.pg_namespace'::regclass AND d.objoid IN (SELECT oid FROM jobs_ns))
        OR (d.classoid = 'pg_catalog.pg_constraint'::regclass
            AND d.objoid IN (SELECT oid FROM pg_catalog.pg_constraint WHERE conrelid IN (SELECT oid FROM rels)))
        OR (d.classoid = 'pg_catalog.pg_policy'::regclass
            AND d.objoid IN (SELECT oid FROM pg_catalog.pg_policy WHERE polrelid IN (SELECT oid FROM rels)))
        OR (d.classoid = 'pg_catalog.pg_extension'::regclass AND d.objoid IN (SELECT oid FROM ext))
    UNION ALL
    -- The privileges pg_dump restores for extension objects (recorded while a script ran).
    SELECT 'initial privileges', pg_catalog.pg_describe_object(ip.classoid, ip.objoid, ip.objsubid),
           ip.privtype::text || ' ' || (SELECT coalesce(string_agg(a::text, ',' ORDER BY a::text), '')
                                    FROM unnest(ip.initprivs) a)
      FROM pg_catalog.pg_init_privs ip
     WHERE (ip.classoid = 'pg_catalog.pg_proc'::regclass AND ip.objoid IN (SELECT oid FROM procs))
        OR (ip.classoid = 'pg_catalog.pg_class'::regclass AND ip.objoid IN (SELECT oid FROM rels))
        OR (ip.classoid = 'pg_catalog.pg_type'::regclass AND ip.objoid IN (SELECT oid FROM types))
        OR (ip.classoid = 'pg_catalog.pg_namespace'::regclass AND ip.objoid IN (SELECT oid FROM jobs_ns))
) AS everything
ORDER BY 1, 2, 3
