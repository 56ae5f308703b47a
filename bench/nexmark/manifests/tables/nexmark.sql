-- The Nexmark event model (person, auction, bid), as JSON files written by bench/nexmark.py,
-- and one JSON file table per query for its results. ${NEXMARK_DATA} and ${NEXMARK_OUT} are
-- set by the benchmark.

CREATE TABLE `nexmark`.`person` (
  id            BIGINT,
  name          STRING,
  email_address STRING,
  credit_card   STRING,
  city          STRING,
  state         STRING,
  date_time     TIMESTAMP(3),
  extra         STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_DATA}/person', 'format' = 'json');

CREATE TABLE `nexmark`.`auction` (
  id          BIGINT,
  item_name   STRING,
  description STRING,
  initial_bid BIGINT,
  reserve     BIGINT,
  date_time   TIMESTAMP(3),
  expires     TIMESTAMP(3),
  seller      BIGINT,
  category    BIGINT,
  extra       STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_DATA}/auction', 'format' = 'json');

CREATE TABLE `nexmark`.`bid` (
  auction   BIGINT,
  bidder    BIGINT,
  price     BIGINT,
  channel   STRING,
  url       STRING,
  date_time TIMESTAMP(3),
  extra     STRING,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_DATA}/bid', 'format' = 'json');

CREATE TABLE `nexmark`.`q0` (
  auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP(3),
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_OUT}/q0', 'format' = 'json');

CREATE TABLE `nexmark`.`q1` (
  auction BIGINT, bidder BIGINT, price DECIMAL(24, 3), date_time TIMESTAMP(3),
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_OUT}/q1', 'format' = 'json');

CREATE TABLE `nexmark`.`q2` (
  auction BIGINT, price BIGINT,
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_OUT}/q2', 'format' = 'json');

CREATE TABLE `nexmark`.`q5` (
  auction BIGINT, window_start TIMESTAMP(3), bids BIGINT,
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_OUT}/q5', 'format' = 'json');

CREATE TABLE `nexmark`.`q7` (
  window_start TIMESTAMP(3), price BIGINT, auction BIGINT, bidder BIGINT,
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_OUT}/q7', 'format' = 'json');

CREATE TABLE `nexmark`.`q8` (
  person_id BIGINT, name STRING, auction_id BIGINT, reserve BIGINT, window_start TIMESTAMP(3),
  __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)
) WITH ('connector' = 'filesystem', 'path' = '${NEXMARK_OUT}/q8', 'format' = 'json');
