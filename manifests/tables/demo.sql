-- Tables of the local demo. File-backed tables play the Kafka topics: the generator
-- writes JSON lines into demo-data/events/, the jobs write JSON lines into demo-data/output/.
-- Relative paths are resolved against the project root.

CREATE TABLE `demo`.`card-transactions` (
  transaction_id STRING,
  account_id     STRING NOT NULL,
  payee          STRING,
  amount         DOUBLE,
  ts             TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = 'demo-data/events/card-transactions',
  'format' = 'json'
);

CREATE TABLE `demo`.`high-value-tx` (
  transaction_id           STRING,
  account_id               STRING,
  payee                    STRING,
  amount                   DOUBLE,
  ts                       TIMESTAMP(3),
  __create_timestamp       TIMESTAMP(3),
  __query_name             STRING,
  __query_description      STRING,
  __query_id               STRING,
  __query_version          INT,
  __query_create_timestamp TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = 'demo-data/output/high-value-tx',
  'format' = 'json'
);

CREATE TABLE `demo`.`spend-per-account` (
  window_start             TIMESTAMP(3),
  window_end               TIMESTAMP(3),
  account_id               STRING,
  tx_count                 BIGINT,
  total_amount             DOUBLE,
  __create_timestamp       TIMESTAMP(3),
  __query_name             STRING,
  __query_description      STRING,
  __query_id               STRING,
  __query_version          INT,
  __query_create_timestamp TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = 'demo-data/output/spend-per-account',
  'format' = 'json'
);

CREATE TABLE `demo`.`payee-bands` (
  transaction_id           STRING,
  payee                    STRING,
  band                     STRING,
  amount                   DOUBLE,
  __create_timestamp       TIMESTAMP(3),
  __query_name             STRING,
  __query_description      STRING,
  __query_id               STRING,
  __query_version          INT,
  __query_create_timestamp TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = 'demo-data/output/payee-bands',
  'format' = 'json'
);
