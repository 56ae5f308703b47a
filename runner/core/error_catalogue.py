"""Every user error code, registered once: its message template, hint and exit code.

A problem is raised by code with parameters (``Problem.of("DDL_UNKNOWN_CONNECTOR",
table=..., connector=...)``); the words live here only. Templates are ``str.format``
strings over the parameters; a hint that renders empty is left out. Where one code
covers several situations, the template takes the specific ``reason`` (and ``hint``).

Exit code 2 means a problem the user can fix: nothing was changed, and the message says
what to do next. A code raised nowhere, or raised without being registered here, fails
``tests/test_error_catalogue.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_ERROR = 2


@dataclass(frozen=True)
class ErrorCode:
    code: str
    message: str
    hint: str | None = None
    exit_code: int = USER_ERROR


_NAME_HINT = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
_UNKNOWN_FIELD = ErrorCode("", "unknown field '{key}'", "{suggestion}allowed: {allowed}")
_INVALID_FIELD_TYPE = ErrorCode("", "'{name}' {expected}")
_INVALID_INTERVAL = ErrorCode(
    "",
    "trigger-interval '{value}' is not an interval",
    "a number and a unit, e.g. '10 seconds', '500 milliseconds', '1 minute'",
)
_JARS_HINT = (
    "run `{fetch}` (it fetches the declared jar set with mvn; every Spark application the runner starts on this "
    "machine uses it); on a cluster of your own, put {jars} on spark.jars"
)
_INVALID_YAML = ErrorCode("", "not valid YAML: {reason}", "{hint}")


def _like(code: str, model: ErrorCode) -> ErrorCode:
    return ErrorCode(code, model.message, model.hint, model.exit_code)


_ENTRIES = (
    # ---- manifests and the template ---------------------------------------------------------
    _like("MANIFEST_INVALID_YAML", _INVALID_YAML),
    _like("TEMPLATE_INVALID_YAML", _INVALID_YAML),
    ErrorCode("MANIFEST_UNREADABLE", "cannot read the manifest: {reason}"),
    ErrorCode("MANIFEST_NOT_UTF8", "the manifest is not UTF-8 text"),
    ErrorCode("MANIFEST_EMPTY", "the manifest is empty", "a manifest is a mapping with {fields}"),
    ErrorCode("MANIFEST_NOT_A_MAPPING", "a manifest must be a YAML mapping of fields", "fields: {fields}"),
    ErrorCode("TEMPLATE_NOT_A_MAPPING", "the template must be a YAML mapping of defaults"),
    ErrorCode("MANIFEST_RESERVED_FIELD", "'meta' is written by the runner on deploy", "remove the meta section"),
    ErrorCode(
        "TEMPLATE_PER_QUERY_FIELD",
        "'{key}' belongs in each manifest, not the template",
        "set it in each manifest; the template holds defaults only",
    ),
    _like("MANIFEST_UNKNOWN_FIELD", _UNKNOWN_FIELD),
    _like("TEMPLATE_UNKNOWN_FIELD", _UNKNOWN_FIELD),
    ErrorCode("MANIFEST_MISSING_REQUIRED_FIELD", "required field '{name}' is missing", "add '{name}: ...'"),
    _like("MANIFEST_INVALID_FIELD_TYPE", _INVALID_FIELD_TYPE),
    ErrorCode(
        "MANIFEST_INVALID_RESTART",
        "restart-strategy.{key} = {value!r} is not valid: {expected}",
        "e.g. restart-strategy: {{attempts: unlimited, delay: 10 seconds, backoff: 2, max-delay: 5 minutes, "
        "failure-window: 1 hour}}",
    ),
    ErrorCode(
        "MANIFEST_INVALID_PLACEHOLDER",
        "sparkProperties.{key}: {reason}",
        "a placeholder is ${{NAME}}, ${{ssm:/path}} or ${{secret:name}}; write $${{ for a literal ${{",
    ),
    ErrorCode(
        "MANIFEST_INVALID_CHANGELOG_ENGINE",
        "sparkProperties.{key} is '{value}'",
        "'incremental' (the default: a changelog query's micro-batch costs what changed) or 'recompute' (the query "
        "over every row held, every micro-batch)",
    ),
    ErrorCode(
        "MANIFEST_PLACEHOLDER_AT_LAUNCH",
        "sparkProperties.{key} is read before the job's driver runs, so it cannot hold a placeholder",
        "write its value as it is; placeholders are resolved inside the driver (set secrets in properties such as "
        "spark.hadoop.* or spark.executorEnv.*)",
    ),
    _like("TEMPLATE_INVALID_FIELD_TYPE", _INVALID_FIELD_TYPE),
    ErrorCode("MANIFEST_INVALID_NAME", "name '{name}' is not valid", _NAME_HINT),
    ErrorCode("MANIFEST_EMPTY_FIELD", "{name} is empty", "write the declared table the query writes to"),
    _like("MANIFEST_INVALID_INTERVAL", _INVALID_INTERVAL),
    _like("TEMPLATE_INVALID_INTERVAL", _INVALID_INTERVAL),
    ErrorCode(
        "MANIFEST_SQL_AND_CODE",
        "both 'sql' and 'code' are set",
        "keep exactly one of 'sql' (Spark SQL) or 'code' (Python)",
    ),
    ErrorCode("MANIFEST_MISSING_QUERY", "neither 'sql' nor 'code' is set", "add 'sql: SELECT ...' or a 'code' snippet"),
    ErrorCode("MANIFEST_EMPTY_SQL", "sql is empty", "write the SELECT the job runs"),
    ErrorCode(
        "MANIFEST_MULTIPLE_STATEMENTS",
        "sql holds more than one statement (';' at line {sql_line} of the SQL)",
        "a manifest holds one SELECT; split other queries into their own manifests",
    ),
    ErrorCode("MANIFEST_EMPTY_CODE", "code is empty", "assign a streaming DataFrame to execution_output"),
    ErrorCode("MANIFEST_CODE_SYNTAX_ERROR", "Python syntax error at line {code_line} of the code: {reason}"),
    ErrorCode(
        "MANIFEST_CODE_NO_OUTPUT",
        "code never assigns `execution_output`",
        "assign the streaming DataFrame to write: execution_output = ...",
    ),
    ErrorCode(
        "MANIFEST_NAME_MISMATCH",
        "name '{name}' does not match the file name '{file_name}'",
        "rename the file to {name}.yaml or the manifest to '{stem}'",
    ),
    ErrorCode("MANIFEST_DUPLICATE_NAME", "name '{name}' is also used by {other}", "give every manifest its own name"),
    ErrorCode(
        "MANIFEST_STILL_PRESENT",
        "'{name}' has a manifest again ({manifest}); nothing undeployed",
        "deploy it instead, or delete the manifest first",
    ),
    # ---- the project and the files given --------------------------------------------------------
    ErrorCode("PROJECT_NOT_FOUND", "{reason}", "{hint}"),
    ErrorCode("FILE_NOT_FOUND", "no such {kind}"),
    ErrorCode("UNSUPPORTED_FILE", "not a manifest (.yaml) or table DDL (.sql)"),
    # ---- table DDL ------------------------------------------------------------------------------
    ErrorCode("SQL_LEXICAL_ERROR", "{reason}"),
    ErrorCode("DDL_SYNTAX_ERROR", "{reason}", "{hint}"),
    ErrorCode("DDL_INVALID_TYPE", "{reason}", "{hint}"),
    ErrorCode("DDL_INVALID_WATERMARK", "{reason}", "{hint}"),
    ErrorCode("DDL_NO_COLUMNS", "table {table} declares no columns", "declare the table's columns"),
    ErrorCode(
        "DDL_UNKNOWN_COLUMN",
        "table {table}: {kind} column '{column}' is not declared",
        "declare the column, or name one the table declares",
    ),
    ErrorCode(
        "DDL_CHANGELOG_WITHOUT_KEY",
        "table {table}: {what} makes a table whose rows change, and it declares no PRIMARY KEY",
        "declare PRIMARY KEY (<columns>) NOT ENFORCED: the runner keeps each key's current row",
    ),
    ErrorCode("DDL_DUPLICATE_TABLE", "table {table} is also declared in {first}", "declare each table once"),
    ErrorCode("DDL_MISSING_CONNECTOR", "table {table}: WITH (...) has no 'connector'", "one of: {connectors}"),
    ErrorCode("DDL_UNKNOWN_CONNECTOR", "table {table}: unknown connector {connector!r}", "one of: {connectors}"),
    ErrorCode("DDL_MISSING_CONNECTOR_OPTION", "table {table}: {reason}", "{hint}"),
    ErrorCode("DDL_UNKNOWN_CONNECTOR_OPTION", "table {table}: {reason}", "{hint}"),
    ErrorCode("DDL_INVALID_CONNECTOR_OPTION", "table {table}: {reason}", "{hint}"),
    ErrorCode(
        "DDL_INVALID_PLACEHOLDER",
        "table {table}: option '{key}': {reason}",
        "a placeholder is ${{NAME}}: letters, digits and '_'; write $${{ for a literal ${{",
    ),
    ErrorCode(
        "UNRESOLVED_PLACEHOLDER",
        "{subject}${{{name}}} is not set{also}",
        "export the variable, or create the SSM parameter or secret it names, where both the runner and the job's "
        "driver can read it",
    ),
    ErrorCode(
        "PLACEHOLDER_LOOKUP_FAILED",
        "cannot look up ${{{reference}}}: {reason}",
        "the runner and the job's driver need AWS credentials that may read it (on EMR: the instance role reads "
        "the team's parameters and secrets only)",
    ),
    # ---- queries, analysed by Spark ----------------------------------------------------------------
    ErrorCode("SQL_SYNTAX_ERROR", "{reason}"),
    ErrorCode("SQL_ANALYSIS_ERROR", "{reason}"),
    ErrorCode("SQL_TYPE_ERROR", "{reason}"),
    ErrorCode("SQL_INVALID_AGGREGATION", "{reason}"),
    ErrorCode("UNKNOWN_COLUMN", "{reason}"),
    ErrorCode("UNKNOWN_FUNCTION", "{reason}"),
    ErrorCode("AMBIGUOUS_COLUMN", "{reason}"),
    ErrorCode("UNKNOWN_TABLE", "{reason}", "{hint}"),
    ErrorCode("CODE_ERROR", "{error}{at}: {reason}"),
    ErrorCode(
        "CODE_NO_OUTPUT",
        "execution_output is {kind}, not a DataFrame",
        "assign the DataFrame to write: execution_output = table('...')",
    ),
    ErrorCode(
        "CODE_NOT_STREAMING",
        "execution_output is a batch DataFrame",
        "build it from table(...) or sql(...) so it reads the streaming sources",
    ),
    ErrorCode("STREAMING_UNSUPPORTED", "cannot run as a stream in {mode} mode: {reason}", "{hint}"),
    ErrorCode(
        "CHANGELOG_QUERY_NOT_SQL",
        "table {table}'s rows change (a changelog table): a query over it is written in SQL, not code",
        "write the query as 'sql:' in the manifest",
    ),
    ErrorCode(
        "CHANGELOG_MIXED",
        "the query reads tables whose rows change ({changing}) together with tables that only grow ({growing})",
        "declare the growing tables as changelog tables (a PRIMARY KEY and 'changelog-mode' = 'upsert'), or "
        "split the query",
    ),
    ErrorCode(
        "CHANGELOG_NONDETERMINISTIC",
        "the query reads tables whose rows change and calls {functions}: its result would change with no change "
        "in the tables",
        "compute the value in the source (a column of the table), or drop the call",
    ),
    ErrorCode("CHANGELOG_TARGET_APPEND_ONLY", "target {table} cannot take updates and deletes: {reason}", "{hint}"),
    ErrorCode(
        "JDBC_UNREACHABLE",
        "table {table}: cannot reach PostgreSQL at {where}: {reason}",
        "check the 'url', that the database accepts connections from here, and the username and password",
    ),
    ErrorCode(
        "JDBC_TABLE_MISSING",
        "table {table}: the database has no table {where_db}",
        "create it in the database (the declared columns and the six metadata columns), or fix 'table-name'",
    ),
    ErrorCode(
        "JDBC_COLUMN_MISSING",
        "table {table}: the database's {where_db} has no column {columns}",
        "add the columns to the database table (metadata columns: __create_timestamp TIMESTAMP, __query_name TEXT, "
        "__query_description TEXT, __query_id TEXT, __query_version INTEGER, __query_create_timestamp TIMESTAMP)",
    ),
    ErrorCode(
        "JDBC_KEY_MISMATCH",
        "table {table}: PRIMARY KEY ({key}) is not a key of the database's {where_db} (its keys: {keys})",
        "declare the database table's primary key or a unique index on these columns: upserts need one",
    ),
    ErrorCode(
        "LOOKUP_TABLE_MISSING",
        "lookup table {table}: the database has no table {where_db}",
        "create it in the database, or fix 'table-name'",
    ),
    ErrorCode(
        "LOOKUP_COLUMN_MISSING",
        "lookup table {table}: the database's {where_db} has no column {columns}",
        "declare only columns the database table has (names match as PostgreSQL folds them)",
    ),
    ErrorCode(
        "LOOKUP_COLUMN_TYPE",
        "lookup table {table}: column {column} is {type}, which is not read from PostgreSQL",
        "declare it as STRING, BIGINT, INT, SMALLINT, BOOLEAN, DOUBLE, FLOAT, DECIMAL(p, s), DATE, TIMESTAMP, "
        "TIMESTAMP_NTZ or BINARY",
    ),
    ErrorCode(
        "LOOKUP_RULE_UNAVAILABLE",
        "the query joins lookup tables, but their snapshots cannot be put into its plans: {reason}",
        "this Spark's optimizer API differs from the one the runner supports; run the runner's Spark version",
    ),
    ErrorCode(
        "LOOKUP_AS_OF_SYNTAX",
        "FOR SYSTEM_TIME AS OF ({at} of the {part}) takes a column of the stream",
        "e.g. JOIN `jdbc`.`users` FOR SYSTEM_TIME AS OF t.proc_time AS u ON u.id = t.user_id",
    ),
    ErrorCode(
        "LOOKUP_AS_OF_MISPLACED",
        "FOR SYSTEM_TIME AS OF ({at} of the {part}) does not follow a table",
        "write it right after the lookup table's name: JOIN `jdbc`.`users` FOR SYSTEM_TIME AS OF t.proc_time AS u",
    ),
    ErrorCode(
        "LOOKUP_AS_OF_NOT_LOOKUP",
        "FOR SYSTEM_TIME AS OF follows table {table}, which is a stream ({connector}), not a lookup table",
        "declare it as a lookup table ('lookup.cache' = 'FULL', or a jdbc table), or drop FOR SYSTEM_TIME AS OF: "
        "joins of two streams need no clause",
    ),
    ErrorCode(
        "LOOKUP_AS_OF_EVENT_TIME",
        "FOR SYSTEM_TIME AS OF {column}: that is the event-time column of {stream} (its WATERMARK); a join as of "
        "event time (a versioned table) is not supported",
        "name a processing-time column: every micro-batch joins the lookup table's snapshot current when it runs",
    ),
    ErrorCode(
        "LOOKUP_PARTIAL_JOIN",
        "{reason}",
        "a PARTIAL table is looked up by key from the stream's rows: FROM stream [LEFT] JOIN table ON table.key = "
        "stream.column",
    ),
    ErrorCode(
        "LOOKUP_ONLY",
        "the query reads only lookup tables ({tables}): a streaming query needs a stream to join them with",
        "read a kafka, filesystem or datagen table and join the lookup tables with it",
    ),
    ErrorCode(
        "CHANGELOG_LOOKUP",
        "the query reads tables whose rows change ({changing}) and lookup tables ({lookups})",
        "declare the lookup tables as changelog tables (their changes then update the result), or join them with "
        "a stream instead",
    ),
    ErrorCode("TARGET_IS_SOURCE", "the query reads its own target {table}", "write to a different table"),
    ErrorCode("TARGET_SCHEMA_MISMATCH", "{reason}", "{hint}"),
    ErrorCode(
        "CONNECTOR_NOT_A_SOURCE",
        "table {table} uses connector '{connector}', which cannot be read",
        "read from a filesystem, kafka or datagen table",
    ),
    ErrorCode(
        "CONNECTOR_NOT_A_SINK",
        "table {table} uses connector '{connector}', which cannot be written",
        "write to a filesystem, kafka, upsert-kafka, jdbc, print or blackhole table",
    ),
    ErrorCode(
        "SINK_PRIMARY_KEY_UNSUPPORTED",
        "target {table} declares a PRIMARY KEY, but file sinks are append-only",
        "drop the PRIMARY KEY, or write to a jdbc, upsert-kafka or keyed kafka table for upserts",
    ),
    ErrorCode(
        "KAFKA_CONNECTOR_MISSING",
        "table {table} uses the kafka connector, but {what} is not on the classpath{absent}",
        _JARS_HINT,
    ),
    ErrorCode(
        "AVRO_CONNECTOR_MISSING",
        "table {table} has Avro values ('format' = 'avro'), but {what} is not on the classpath{absent}",
        _JARS_HINT,
    ),
    ErrorCode(
        "KAFKA_CLIENT_CLASS_MISSING",
        "table {table}: its Kafka client settings name {detail}, which is not on the classpath",
        "for MSK's IAM authentication run `{fetch}` (the jar set holds {jars}); otherwise check the class names in "
        "properties.sasl.jaas.config and properties.sasl.client.callback.handler.class",
    ),
    ErrorCode(
        "KAFKA_PROTOCOL_MISMATCH",
        "table {table}: broker {broker} does not speak {protocol}: {reason}",
        "set properties.security.protocol to what that listener serves (MSK: port 9098 is SASL_SSL with IAM, 9094 "
        "SSL, 9092 PLAINTEXT), or point properties.bootstrap.servers at the listener the settings are for",
    ),
    ErrorCode("S3_CONNECTOR_MISSING", "{where} is on s3://, but {what} is not on the classpath{absent}", _JARS_HINT),
    # ---- what a job is handed ----------------------------------------------------------------------
    ErrorCode(
        "JOB_SPEC_WITHOUT_META",
        "manifest {name} has no meta section: only deployed manifests run as jobs",
        "start jobs with sql-runner deploy or sql-runner run, which write the meta section",
    ),
    # ---- deployments ---------------------------------------------------------------------------------
    ErrorCode(
        "DEPLOY_IN_PROGRESS",
        "{name}: {reason}; standing down, nothing changed",
        "wait for it to finish, then run plan again",
    ),
    ErrorCode(
        "DEPLOYED_STATE_CHANGED",
        "{name}: the deployed record changed while this deploy was deciding; standing down",
        "run plan again",
    ),
    ErrorCode(
        "NO_STATE_TO_RESTORE",
        "{name}: {reasons}",
        "restore its checkpoints or savepoints from a backup; to start over with clean state, delete "
        "{deployed} from the manifests bucket",
    ),
    ErrorCode("NOT_DEPLOYED", "no job named '{name}' is deployed", "sql-runner status lists the deployed jobs"),
    ErrorCode("NOT_RUNNING", "{name} is not running; its latest state is already kept", "sql-runner status"),
    ErrorCode(
        "SAVEPOINT_STATE_UNREADABLE",
        "{name}: this release cannot restore the state of v{version} ({why}); a savepoint would stop the job and its"
        " restart refuse that state",
        "sql-runner stop {name} keeps a savepoint without a restart; the next deploy then starts a new version with"
        " clean state",
    ),
    ErrorCode("NO_HISTORY", "no decisions recorded for '{name}'", "sql-runner status lists the deployed jobs"),
    ErrorCode("DEPLOY_ALL_WITH_PATHS", "give manifests or --all, not both"),
    ErrorCode(
        "MODE_WITH_PATHS",
        "--mode chooses among all of the project's manifests: give --mode or manifests, not both",
    ),
    ErrorCode(
        "OBJECT_VERSION_NEEDS_ONE_MANIFEST",
        "--object-version pins one manifest: give --from-store and exactly one manifests/<name>.yaml",
    ),
    ErrorCode("OBJECT_VERSION_NEEDS_S3", "--object-version needs --manifests-bucket (S3)"),
    ErrorCode(
        "OBJECT_VERSION_NOT_FOUND",
        "{uri} has no version '{version}'",
        "the version may have been deleted; push it again",
    ),
    ErrorCode("PREVIEW_NEEDS_ONE_QUERY", "give either a MANIFEST or --sql, not both or neither"),
    # ---- targets -------------------------------------------------------------------------------------
    ErrorCode("UNKNOWN_TARGET", "target '{kind}' is not known", "one of: {targets}"),
    ErrorCode("TARGET_NEEDS_MASTER", "--target standalone needs --master spark://host:port"),
    ErrorCode("TARGET_NEEDS_RESOURCE_MANAGER", "--target yarn needs --resource-manager http://host:8088"),
    ErrorCode(
        "JUDGING_FAILED",
        "{name}: the job's driver {why} before it judged the manifest; nothing was deployed",
        "its log says why: {log}",
    ),
    ErrorCode(
        "SUBMIT_FAILED",
        "spark-submit to YARN failed (exit {status}): {output}",
        "check the spark-submit output quoted here and the ResourceManager's logs",
    ),
    ErrorCode(
        "YARN_QUEUE_UNKNOWN",
        "YARN has no queue {queue} (spark.yarn.queue): {output}",
        "set spark.yarn.queue in the manifest's sparkProperties to one of the cluster's queues, or leave it out",
    ),
    ErrorCode(
        "YARN_CONTAINER_TOO_LARGE",
        "the {container} container asks for {asked} MB ({setting} plus its overhead), more than the {largest} MB "
        "any node of the cluster offers: {output}",
        "lower {setting} in the manifest's sparkProperties (the overhead is 10 % of it, at least 384 MB)",
    ),
    ErrorCode(
        "SUBMITTED_APP_NOT_FOUND",
        "spark-submit succeeded but no active application is tagged {tags}",
        "check that spark.yarn.tags reaches YARN and the application was accepted",
    ),
    ErrorCode("RESOURCE_MANAGER_ERROR", "ResourceManager {url} answered HTTP {status} to {request}{said}"),
    ErrorCode(
        "RESOURCE_MANAGER_UNREACHABLE",
        "cannot reach the ResourceManager at {url}{purpose}: {reason}",
        "check --resource-manager (e.g. http://<emr-master>:8088)",
    ),
    ErrorCode("KILL_REFUSED", "ResourceManager refused to kill {app}: HTTP {status}{said}"),
    # ---- session mode --------------------------------------------------------------------------------
    ErrorCode(
        "SESSION_TARGET_UNAVAILABLE",
        "{name} is a session query (mode: session), but {target} jobs cannot start it here",
        "start the team's session (sql-runner session start); it applies session manifests itself",
    ),
    ErrorCode(
        "SESSION_NOT_RUNNING",
        "{name} is a session query (mode: session) and team {team} has no session running",
        "sql-runner session start (it then applies every session manifest by itself)",
    ),
    ErrorCode("SESSION_START_FAILED", "the session could not start {name}: {reason}", "sql-runner history {name}"),
    ErrorCode(
        "SESSION_PREVIEW_FAILED",
        "the session ({run}) could not preview the query: {reason}",
        "fix the query, or preview on local Spark with --local",
    ),
    ErrorCode(
        "CONSOLE_TOKEN_NAME",
        "no console token can be named so: {reason}",
        "choose a name like 'operator' or 'alice@example.com' with --token-name",
    ),
    ErrorCode(
        "SESSION_NO_ANSWER",
        "the session did not answer the request to start {name} within {seconds}s",
        "sql-runner session status; the session's log is in the state folder's logs/",
    ),
    ErrorCode(
        "SESSION_DID_NOT_START",
        "the session application did not come up: {detail}",
        "read the session's log (named above) for the cause",
    ),
    ErrorCode("SESSION_BAD_CONF", "--conf '{value}' is not KEY=VALUE"),
    ErrorCode(
        "SESSION_PROPERTY_NOT_PER_QUERY",
        "sparkProperties.{key} cannot be set per query in a session: it belongs to the whole application",
        "a session query can set runtime SQL properties (spark.sql.*); set the rest with "
        "sql-runner session start --conf, or run this query with mode: application",
    ),
    ErrorCode(
        "SESSION_QUERY_BUILD_TIMEOUT",
        "building {name} did not finish within {seconds}s (its code snippet never returned): not started",
        "fix the code snippet; the query stays parked until its manifest changes",
    ),
    ErrorCode("SESSION_QUERY_START_FAILED", "{name} could not start in the session: {reason}"),
    ErrorCode(
        "SPARK_VERSION_UNSUPPORTED",
        "pyspark {version} is not a Spark version the runner supports ({supported})",
        "install the pinned pyspark (make creates .venv/ with it); on EMR, a release whose Spark is {supported}",
    ),
)

CATALOGUE: dict[str, ErrorCode] = {}
for _entry in _ENTRIES:
    if _entry.code in CATALOGUE:
        raise ValueError(f"error code {_entry.code} is registered twice")
    CATALOGUE[_entry.code] = _entry
