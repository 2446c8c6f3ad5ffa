// The Powertools side of scripts/bench-vs-powertools.sh: AWS Powertools'
// makeIdempotent with its DynamoDB persistence layer, keyed on chargeId,
// driven exactly as bench/claims drives our store: K fresh keys by N
// concurrent workers (claim, no-op work, complete), then the same K keys
// again (every one must return the stored result without running the
// work). One JSON line per concurrency, the same keys as bench/claims.
//
//   node bench.mjs --endpoint http://127.0.0.1:PORT --keys 1000 --concurrency 1,8,32
import { parseArgs } from 'node:util';
import {
  CreateTableCommand,
  DeleteTableCommand,
  DynamoDBClient,
  waitUntilTableExists,
} from '@aws-sdk/client-dynamodb';
import { IdempotencyConfig, makeIdempotent } from '@aws-lambda-powertools/idempotency';
import { DynamoDBPersistenceLayer } from '@aws-lambda-powertools/idempotency/dynamodb';

const { values } = parseArgs({
  options: {
    endpoint: { type: 'string', default: process.env.AWS_ENDPOINT_URL ?? '' },
    keys: { type: 'string', default: '1000' },
    concurrency: { type: 'string', default: '1,8,32' },
  },
});
const keys = Number(values.keys);
const levels = values.concurrency.split(',').map(Number);
if (!Number.isInteger(keys) || keys < 1 || levels.some((n) => !Number.isInteger(n) || n < 1)) {
  console.error('bench.mjs: --keys and --concurrency need positive integers');
  process.exit(2);
}
const clientConfig = { region: process.env.AWS_REGION ?? 'us-east-1' };
if (values.endpoint) {
  clientConfig.endpoint = values.endpoint;
  clientConfig.credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
}
const client = new DynamoDBClient(clientConfig);

async function parallel(workers, n, fn) {
  let next = 0;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (let i = next++; i < n; i = next++) await fn(i);
    }),
  );
}

for (const workers of levels) {
  const tableName = `powertools-bench-${workers}-${Date.now()}`;
  await client.send(
    new CreateTableCommand({
      TableName: tableName,
      AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
      KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      BillingMode: 'PAY_PER_REQUEST',
    }),
  );
  await waitUntilTableExists({ client, maxWaitTime: 60 }, { TableName: tableName });
  let runs = 0;
  // Outside Lambda there is no remaining time: a fixed 30 s gives each
  // record an in-progress expiry, Powertools' lease (ours defaults to 30 s).
  const config = new IdempotencyConfig({ eventKeyJmesPath: 'chargeId' });
  config.registerLambdaContext({ getRemainingTimeInMillis: () => 30_000 });
  const charge = makeIdempotent(
    async (event) => {
      runs++;
      return { status: 'DEBITED', detail: 'CBS0000000001', chargeId: event.chargeId };
    },
    {
      persistenceStore: new DynamoDBPersistenceLayer({ tableName, awsSdkV3Client: client }),
      config,
    },
  );
  const event = (i) => ({ chargeId: `CHG-${workers}-${String(i).padStart(7, '0')}`, amount: 2500, currency: 'INR' });
  const phase = async () => {
    const start = process.hrtime.bigint();
    await parallel(workers, keys, async (i) => {
      const r = await charge(event(i));
      if (r.chargeId !== event(i).chargeId) throw new Error(`wrong result for ${event(i).chargeId}`);
    });
    return keys / (Number(process.hrtime.bigint() - start) / 1e9);
  };
  const fresh = await phase();
  const dup = await phase();
  if (runs !== keys) throw new Error(`the work ran ${runs} times for ${keys} keys`);
  console.log(
    JSON.stringify({ impl: 'powertools', concurrency: workers, keys, fresh_per_s: fresh, dup_per_s: dup, work_runs: runs }),
  );
  await client.send(new DeleteTableCommand({ TableName: tableName }));
}
