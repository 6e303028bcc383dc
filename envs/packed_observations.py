"""Images beside a vector in one array: PackedObservation, the space the engine stores such an
observation as (its images and the vector, with the action mask's entries if any, in one flat
uint8-safe row), and PackImages, the wrapper that packs them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from asyncrl.envs.action_masks import ACTION_MASK, mask_size_of, mask_vector
from asyncrl.envs.observations import (
    ObservedWithInfo,
    channels_first,
    flatten,
    has_images_beside,
    is_flattenable,
    is_hwc_image,
    is_image_space,
)
from asyncrl.envs.registry import EnvError


class PackedObservation(gym.spaces.Box):
    """Images beside other entries (a Dict observation with an image; an image with an action mask)
    as one uint8 vector: each image's CHW bytes in turn, then, from a 4-byte boundary, the other
    entries as one float32 vector (gymnasium's spaces.flatten of them, in the Dict's order) whose
    last `mask_size` floats are the env's action mask. Shared memory, the learner's batches and the
    vector envs carry it as any uint8 observation, and the model reads its parts back as views
    (model.unpack_observation), as PufferLib's emulation packs structured observations into one
    buffer. `unpack` gives the parts by name: each image's key, and "vector"."""

    def __init__(
        self, image_shapes: dict[str, tuple[int, ...]], vector_size: int, mask_size: int = 0
    ):
        self.image_shapes = dict(image_shapes)
        self.vector_size = vector_size
        self.mask_size = mask_size
        ends = np.cumsum([0] + [int(np.prod(shape)) for shape in self.image_shapes.values()])
        self.image_offsets = ends[:-1].tolist()
        # a float32 view needs its first byte 4-aligned
        self.vector_offset = -(-int(ends[-1]) // 4) * 4
        super().__init__(0, 255, (self.vector_offset + 4 * vector_size,), np.uint8)

    def __repr__(self) -> str:
        return f"PackedObservation(images {self.image_shapes}, vector of {self.vector_size}, mask of {self.mask_size})"

    def pack(self, images: list[np.ndarray], vector: np.ndarray) -> np.ndarray:
        packed = np.zeros(self.shape, np.uint8)
        for offset, image in zip(self.image_offsets, images):
            packed[offset : offset + image.size] = image.ravel()
        packed[self.vector_offset :].view(np.float32)[:] = vector
        return packed

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Views of the parts of one observation or a batch [..., bytes]: each image [..., C, H, W]
        by its key, and the float32 "vector" [..., vector_size] (as the ONNX graph of `asyncrl
        export` takes them)."""
        lead = packed.shape[:-1]
        parts = {
            key: packed[..., offset : offset + int(np.prod(shape))].reshape(*lead, *shape)
            for (key, shape), offset in zip(self.image_shapes.items(), self.image_offsets)
        }
        parts["vector"] = np.ascontiguousarray(packed[..., self.vector_offset :]).view(np.float32)
        return parts

    def sample(self, *args, **kwargs) -> np.ndarray:
        """Random images and a standard normal vector (random bytes would read back as NaNs among
        the floats)."""
        images = [
            self.np_random.integers(0, 256, shape, dtype=np.uint8)
            for shape in self.image_shapes.values()
        ]
        return self.pack(
            images, self.np_random.standard_normal(self.vector_size).astype(np.float32)
        )


class ImagesAndVector:
    """Turns an env's observations with images beside other entries (and an action mask: in the
    Dict, or in the info with from_info) into a PackedObservation's: HWC images made CHW, the rest
    flattened, the mask after it."""

    def __init__(
        self, name: str, space: gym.Space, action_space: gym.Space, from_info: bool = False
    ):
        entries = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {"obs": space}
        self.images = [key for key, entry in entries.items() if is_image_space(entry)]
        self.to_chw = [is_hwc_image(entries[key]) for key in self.images]
        self.rest = gym.spaces.Dict(
            {
                key: entry
                for key, entry in entries.items()
                if key not in self.images and key != ACTION_MASK
            }
        )
        if not is_flattenable(self.rest):
            raise EnvError(
                f"env {name!r}: the observation entries {self.rest} beside its images cannot be one vector"
            )
        mask_size = mask_size_of(name, action_space) if from_info or ACTION_MASK in entries else 0
        self.from_info = from_info
        self.dict_obs = isinstance(space, gym.spaces.Dict)
        shapes = {
            key: channels_first(entries[key]).shape if chw else entries[key].shape
            for key, chw in zip(self.images, self.to_chw)
        }
        rest_size = gym.spaces.flatdim(self.rest) if self.rest.spaces else 0
        self.space = PackedObservation(shapes, rest_size + mask_size, mask_size)

    def observe(self, obs, info: dict | None = None) -> np.ndarray:
        entries = obs if self.dict_obs else {"obs": obs}
        images = [
            np.transpose(entries[key], (2, 0, 1)) if chw else entries[key]
            for key, chw in zip(self.images, self.to_chw)
        ]
        rest = {key: entries[key] for key in self.rest.spaces}
        vector = flatten(self.rest, rest) if rest else np.zeros(0, np.float32)
        if self.space.mask_size:
            mask = (info or {}).get(ACTION_MASK) if self.from_info else entries[ACTION_MASK]
            vector = np.concatenate([vector, mask_vector(mask, self.space.mask_size)])
        return self.space.pack(images, vector)


class PackImages(ObservedWithInfo, gym.utils.RecordConstructorArgs):
    """An env whose observations have images beside other entries, observed as a PackedObservation
    (ImagesAndVector)."""

    def __init__(self, env: gym.Env, name: str, from_info: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, name=name, from_info=from_info)
        gym.Wrapper.__init__(self, env)
        self.packer = ImagesAndVector(name, env.observation_space, env.action_space, from_info)
        self.observation_space = self.packer.space
        self._observe = self.packer.observe


def has_image(space: gym.Space) -> bool:
    """An image observation, or a Dict observation with one, packed or not (the engine's defaults
    then suit it, not a vector's)."""
    return is_image_space(space) or has_images_beside(space) or isinstance(space, PackedObservation)
