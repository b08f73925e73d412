// TokenReview answers checked against the audiences asked for.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AccessReviewClient, parseTokenReview } from '../../../src/cluster/access-review.js';

const user = { username: 'alice', groups: ['g'] };
const answer = (audiences?: string[]) => ({
  status: { authenticated: true, user, ...(audiences ? { audiences } : {}) },
});

describe('parseTokenReview and audiences', () => {
  it('authenticated for one of the audiences asked: the user', () => {
    expect(parseTokenReview(answer(['other', 'clbprobe:node-a']), ['clbprobe:node-a'])).toEqual({
      authenticated: true,
      user,
    });
  });

  it('authenticated for another audience: not authenticated, naming both', () => {
    expect(parseTokenReview(answer(['clbprobe:node-b']), ['clbprobe:node-a'])).toEqual({
      authenticated: false,
      error: 'token not valid for clbprobe:node-a (reviewed for clbprobe:node-b)',
    });
  });

  it('no audiences in the answer (an authenticator that ignores them): not authenticated', () => {
    expect(parseTokenReview(answer(), ['clbprobe:node-a'])).toEqual({
      authenticated: false,
      error: "token not valid for clbprobe:node-a (reviewed for the API server's audiences)",
    });
  });

  it('no audiences asked: the API server audiences are not checked', () => {
    expect(parseTokenReview(answer())).toEqual({ authenticated: true, user });
  });
});

describe('AccessReviewClient.reviewToken and audiences', () => {
  let server: Server;
  let client: AccessReviewClient;
  beforeAll(async () => {
    // An API server whose authenticator ignores spec.audiences.
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(201).end(JSON.stringify(answer())));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    client = new AccessReviewClient({
      server: `http://127.0.0.1:${port}`,
      source: 'test',
      requestOptions: async () => ({}),
    });
  });
  afterAll(() => {
    server.closeAllConnections();
    server.close();
  });

  it('asked for an audience the answer does not grant: not authenticated', async () => {
    expect(await client.reviewToken('t', ['clbprobe:node-a'])).toMatchObject({ authenticated: false });
    expect(await client.reviewToken('t')).toMatchObject({ authenticated: true });
  });
});
