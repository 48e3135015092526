// Validates an OpenAPI document against the official OpenAPI schema of its version (npm's
// @seriousme/openapi-schema-validator, built on ajv), and checks that every $ref resolves. Usage:
//   node openapi-validate.mjs FILE
// Prints "valid <version>" and exits 0, or prints the errors and exits 1. Run by http/api/integration's
// TestOpenAPIDocumentIsValid.
import { Validator } from '@seriousme/openapi-schema-validator';

const file = process.argv[2];
if (!file) {
  console.error('usage: node openapi-validate.mjs FILE');
  process.exit(2);
}
const validator = new Validator();
const res = await validator.validate(file);
if (!res.valid) {
  console.error(JSON.stringify(res.errors, null, 2));
  process.exit(1);
}
try {
  validator.resolveRefs(); // throws on a $ref that points nowhere
} catch (e) {
  console.error('unresolved reference: ' + e.message);
  process.exit(1);
}
console.log('valid', validator.version);
