CREATE TABLE `demo`.`events` (
  id         STRING NOT NULL COMMENT 'the event''s id',
  user_id    BIGINT,
  amount     DECIMAL(10, 2),
  tags       ARRAY<STRING>,
  ts         TIMESTAMP(3),
  amount_eur AS amount * 0.9 COMMENT 'computed',
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = 'data/events',
  'format' = 'json'
);

CREATE TABLE `demo`.`users` (
  id     BIGINT,
  name   STRING,
  region STRING,
  PRIMARY KEY (id) NOT ENFORCED
) WITH (
  'connector' = 'filesystem',
  'path' = 'data/users',
  'format' = 'json',
  'lookup.cache' = 'FULL',
  'lookup.full-cache.periodic-reload.interval' = '1 min'
);

CREATE TABLE `demo`.`enriched` (
  id                       STRING,
  name                     STRING,
  region                   STRING,
  amount                   DECIMAL(10, 2),
  __create_timestamp       TIMESTAMP(3),
  __query_name             STRING,
  __query_description      STRING,
  __query_id               STRING,
  __query_version          INT,
  __query_create_timestamp TIMESTAMP(3)
) PARTITIONED BY (region) WITH (
  'connector' = 'filesystem',
  'path' = '${OUT_ROOT}/enriched',
  'format' = 'json'
);

CREATE TABLE `demo`.`enriched-by-region` (
  id                       STRING,
  name                     STRING,
  region                   STRING,
  amount                   DECIMAL(10, 2),
  __create_timestamp       TIMESTAMP(3),
  __query_name             STRING,
  __query_description      STRING,
  __query_id               STRING,
  __query_version          INT,
  __query_create_timestamp TIMESTAMP(3)
) PARTITIONED BY (region) WITH (
  'connector' = 'filesystem',
  'path' = '${OUT_ROOT}/enriched-by-region',
  'format' = 'json'
);
