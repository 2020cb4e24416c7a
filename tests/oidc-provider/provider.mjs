// A real OpenID Provider for Bulkhead's sign-in tests: panva's certified `oidc-provider`,
// with what a test needs around it and nothing changed inside it.
//
// - Listens on 127.0.0.1 (port `PORT`, 0 for any) and prints `listening <issuer>` once ready.
// - Clients come from `CLIENTS` (JSON: [{client_id, client_secret, redirect_uris,
//   token_endpoint_auth_method}]).
// - Signing in needs no password: the interaction finishes at once as the account named by the
//   authorization request's `login_hint`, or, without one, shows a form asking for the account
//   (a browser's test types it); its email is `<account>@example.com`. The grant covers what
//   the client asked for (a first-party provider's consent).
// - `POST /test/tamper?mode=M` makes the token endpoint (or, for `userinfo-*`, the userinfo
//   endpoint) answer something a client must refuse, or (`limited`) a 429 with `Retry-After:
//   2`, until `mode=off`; see `tamper` below.
// - `POST /test/rotate` replaces the signing key (a new `kid`) as a provider rotating its keys
//   does: the JWKS shows the new key only, and new ID tokens are signed with it.
import http from 'node:http';
import { URL } from 'node:url';

import * as jose from 'jose';
import Provider from 'oidc-provider';

const clients = JSON.parse(process.env.CLIENTS ?? '[]');
let tamperMode = 'off';
let keyNumber = 0;
let signingKey;
let provider;

async function signingKeyNew() {
  keyNumber += 1;
  const { privateKey } = await jose.generateKeyPair('RS256', { extractable: true });
  const jwk = await jose.exportJWK(privateKey);
  return { ...jwk, kid: `key-${keyNumber}`, alg: 'RS256', use: 'sig' };
}

function providerNew(issuer, key) {
  const made = new Provider(issuer, {
    clients,
    jwks: { keys: [key] },
    scopes: ['openid', 'email', 'profile'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['preferred_username'] },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    cookies: { keys: ['bulkhead-test-cookie-key'] },
    ttl: { AccessToken: 600, Grant: 600, IdToken: 600, Interaction: 600, Session: 600 },
    async findAccount(ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return { sub, email: `${sub}@example.com`, email_verified: true, preferred_username: sub };
        },
      };
    },
    async loadExistingGrant(ctx) {
      if (!ctx.oidc.session?.accountId) return undefined;
      const grant = new ctx.oidc.provider.Grant({
        clientId: ctx.oidc.client.clientId,
        accountId: ctx.oidc.session.accountId,
      });
      grant.addOIDCScope(ctx.oidc.params.scope ?? 'openid');
      await grant.save();
      return grant;
    },
  });
  made.use(interactions);
  made.use(tamper);
  return made;
}

// Finishes a login interaction as the account named by `login_hint`, or, without one (a
// browser), as the one typed into a form.
async function interactions(ctx, next) {
  const match = /^\/interaction\/([^/]+)$/.exec(ctx.path);
  if (!match) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  let accountId = details.params.login_hint;
  if (!accountId && ctx.method === 'POST') {
    const chunks = [];
    for await (const chunk of ctx.req) chunks.push(chunk);
    accountId = new URLSearchParams(Buffer.concat(chunks).toString()).get('login');
  }
  if (!accountId) {
    ctx.type = 'html';
    ctx.body = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Test provider: sign in</title></head>
<body><main><h1>Test provider</h1><form method="post" action="/interaction/${match[1]}">
<label for="login">Account</label> <input id="login" name="login" autocomplete="username" required>
<button type="submit">Continue</button></form></main></body></html>`;
    return undefined;
  }
  const redirectTo = await provider.interactionResult(ctx.req, ctx.res, { login: { accountId } }, { mergeWithLastSubmission: false });
  ctx.status = 303;
  ctx.redirect(redirectTo);
  return undefined;
}

function payloadOf(jwt) {
  return JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString());
}

async function signed(payload, key, kid) {
  return new jose.SignJWT(payload).setProtectedHeader({ alg: 'RS256', kid }).sign(key);
}

// What the token or userinfo endpoint answers in each tamper mode.
async function tamper(ctx, next) {
  if (tamperMode === 'limited' && ctx.path === '/token') {
    ctx.status = 429;
    ctx.set('Retry-After', '2');
    ctx.body = { error: 'slow_down' };
    return;
  }
  await next();
  if (tamperMode === 'off' || ctx.status !== 200 || typeof ctx.body !== 'object') return;
  if (ctx.path === '/me') {
    if (tamperMode === 'userinfo-other-subject') ctx.body = { ...ctx.body, sub: 'mallory' };
    return;
  }
  if (ctx.path !== '/token' || !ctx.body.id_token) return;
  const original = ctx.body.id_token;
  const claims = payloadOf(original);
  const realKey = await jose.importJWK(signingKey, 'RS256');
  let idToken;
  switch (tamperMode) {
    case 'altered-signature': {
      const [header, payload, signature] = original.split('.');
      const bytes = Buffer.from(signature, 'base64url');
      bytes[0] ^= 0x01;
      idToken = `${header}.${payload}.${bytes.toString('base64url')}`;
      break;
    }
    case 'altered-claims': {
      const [header, , signature] = original.split('.');
      const payload = Buffer.from(JSON.stringify({ ...claims, sub: 'mallory' })).toString('base64url');
      idToken = `${header}.${payload}.${signature}`;
      break;
    }
    case 'foreign-key': {
      const { privateKey } = await jose.generateKeyPair('RS256');
      idToken = await signed({
        ...claims, iss: 'https://issuer.invalid', aud: 'another-client', sub: 'mallory',
      }, privateKey, 'foreign-key');
      break;
    }
    case 'unknown-key': {
      const { privateKey } = await jose.generateKeyPair('RS256');
      idToken = await signed(claims, privateKey, 'a-key-it-never-published');
      break;
    }
    case 'expired':
      idToken = await signed({ ...claims, iat: 978307200, exp: 978310800 }, realKey, signingKey.kid);
      break;
    case 'other-audience':
      idToken = await signed({ ...claims, aud: 'another-client' }, realKey, signingKey.kid);
      break;
    case 'other-issuer':
      idToken = await signed({ ...claims, iss: 'https://issuer.invalid' }, realKey, signingKey.kid);
      break;
    case 'other-nonce':
      idToken = await signed({ ...claims, nonce: 'a-nonce-of-another-sign-in' }, realKey, signingKey.kid);
      break;
    case 'alg-none': {
      const header = Buffer.from(JSON.stringify({ alg: 'none' })).toString('base64url');
      idToken = `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.`;
      break;
    }
    case 'not-a-jwt':
      idToken = 'not-a-jwt';
      break;
    case 'missing':
      idToken = undefined;
      break;
    default:
      return;
  }
  ctx.body = { ...ctx.body, id_token: idToken };
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://test');
  if (req.method === 'POST' && url.pathname === '/test/tamper') {
    tamperMode = url.searchParams.get('mode') ?? 'off';
    res.writeHead(204).end();
    return;
  }
  if (req.method === 'POST' && url.pathname === '/test/rotate') {
    signingKey = await signingKeyNew();
    provider = providerNew(provider.issuer, signingKey);
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kid: signingKey.kid }));
    return;
  }
  provider.callback()(req, res);
});

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', async () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  signingKey = await signingKeyNew();
  provider = providerNew(issuer, signingKey);
  process.stdout.write(`listening ${issuer}\n`);
});
