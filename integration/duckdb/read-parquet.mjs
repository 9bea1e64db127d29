// read-parquet.mjs FILE: reads a Parquet file with DuckDB (an
// independent reader) and prints, as one JSON object, its rows (key,
// content in base64), the DuckDB types of the columns, and the row
// groups with their compression codecs, for integration/record_test.go.
import { DuckDBInstance } from '@duckdb/node-api';

const file = process.argv[2];
const db = await DuckDBInstance.create(':memory:');
const conn = await db.connect();
const q = async (sql, ...params) => (await conn.runAndReadAll(sql, params)).getRowObjectsJson();
const out = {
  rows: await q('SELECT key, to_base64(content) AS content, typeof(key) AS key_type, typeof(content) AS content_type FROM read_parquet($1) ORDER BY key', file),
  schema: await q('SELECT name, type, logical_type FROM parquet_schema($1)', file),
  chunks: await q('SELECT row_group_id, row_group_num_rows, path_in_schema, compression FROM parquet_metadata($1) ORDER BY row_group_id, path_in_schema', file),
};
process.stdout.write(JSON.stringify(out) + '\n');
